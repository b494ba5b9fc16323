"""What a test input and its results are: scenarios, run results and verdict statuses, split policies."""
