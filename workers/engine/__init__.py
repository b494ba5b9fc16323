"""The engine tier: vLLM's real engine on the tiny hybrid GDN model, in a child process, with a state audit."""
