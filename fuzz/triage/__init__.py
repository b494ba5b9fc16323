"""Re-running inputs: replay on a tier and judge, confirm a finding on the real engine."""
