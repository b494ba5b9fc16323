"""The model-info cache a whole branch's process is seeded with (``workers.sim.model_info``)."""

from __future__ import annotations

from workers.sim import model_info


def test_seed_copies_only_the_files_the_childs_cache_lacks_and_never_overwrites(tmp_path, monkeypatch):
    source, root = tmp_path / "parent", tmp_path / "child-cache"
    source.mkdir()
    (source / "a-A.json").write_text('{"hash": "1"}')
    (source / "b-B.json").write_text('{"hash": "2"}')
    (source / "notes.txt").write_text("not a model info")
    (source / "link.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    (root / model_info.SUBDIR).mkdir(parents=True)
    (root / model_info.SUBDIR / "b-B.json").write_text('{"hash": "child"}')
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(root))
    model_info.seed(str(source))
    target = root / model_info.SUBDIR
    assert sorted(p.name for p in target.iterdir()) == ["a-A.json", "b-B.json"]
    assert (target / "a-A.json").read_text() == '{"hash": "1"}'
    assert (target / "b-B.json").read_text() == '{"hash": "child"}'  # the child's own file is kept


def test_seed_without_a_source_or_a_cache_root_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    model_info.seed(str(tmp_path))  # no cache root: nothing to seed
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "root"))
    model_info.seed("")
    model_info.seed(str(tmp_path / "missing"))
    assert not (tmp_path / "root" / model_info.SUBDIR).exists() or not any((tmp_path / "root" / model_info.SUBDIR).iterdir())
