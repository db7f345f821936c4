"""The stages' Jinja environment caches compiled templates, never serves a stale one, and works without a cache."""

import tempfile

import jinja2
import jinja2.bccache

from pipeline.stages.run import templates


def test_compiled_templates_are_cached_and_an_edit_compiles_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # Jinja's cache lives under the temp dir
    (tmp_path / "tmp").mkdir()
    source = tmp_path / "t"
    source.mkdir()
    (source / "a.j2").write_text("one {{ x }}")
    assert templates.environment(source).get_template("a.j2").render(x=1) == "one 1"
    cached = list((tmp_path / "tmp").glob("_jinja2-cache-*/*.cache"))
    assert len(cached) == 1, "the compiled template went to the cache"
    compiled = []
    monkeypatch.setattr(jinja2.Environment, "compile", lambda self, *a, **k: compiled.append(a) or 1 / 0)
    assert templates.environment(source).get_template("a.j2").render(x=2) == "one 2", "read from the cache"
    assert not compiled
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (source / "a.j2").write_text("two {{ x }}")
    assert templates.environment(source).get_template("a.j2").render(x=3) == "two 3", "an edit is compiled anew"


def test_without_a_cache_directory_templates_compile_each_time(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file"))  # no directory can be made under a file
    (tmp_path / "a.j2").write_text("{{ x }}!")
    env = templates.environment(tmp_path, keep_trailing_newline=True)
    assert env.bytecode_cache is None and env.get_template("a.j2").render(x="ok") == "ok!"


def test_a_cache_that_cannot_be_written_leaves_the_template_compiled(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "a.j2").write_text("{{ x }}?")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", full)  # where jinja2 writes a compiled template
    assert templates.environment(tmp_path).get_template("a.j2").render(x="ok") == "ok?"


def test_a_damaged_cache_entry_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "a.j2").write_text("{{ x }}.")
    assert templates.environment(tmp_path).get_template("a.j2").render(x=1) == "1."
    (entry,) = (tmp_path / "tmp").glob("_jinja2-cache-*/*.cache")
    entry.write_bytes(entry.read_bytes()[: len(jinja2.bccache.bc_magic) + 1])  # the header, then cut short
    assert templates.environment(tmp_path).get_template("a.j2").render(x=2) == "2."
