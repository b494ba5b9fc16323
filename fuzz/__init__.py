"""gdnfuzz: what fuzzing vLLM's Mamba/GDN align-mode split is, wherever a scenario runs (see README's Layout)."""

HOMEPAGE = "https://github.com/vllm-project/gdnfuzz"  # also pyproject.toml's [project.urls] (tests/test_ci_files.py)


def package_version() -> str:
    """The installed distribution's version (``pyproject.toml``), or "unknown" when run from a bare tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gdnfuzz")
    except PackageNotFoundError:
        return "unknown"
