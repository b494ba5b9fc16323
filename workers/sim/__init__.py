"""The sim tier: vLLM's real Scheduler and KV-cache manager, the model runner mirrored over exact symbolic states."""
