"""What lives on disk: atomic writes, crash bundles, the corpus merge, campaign stats."""
