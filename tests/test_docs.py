"""The README stays short and the documentation's links hold: every relative link names a file of the repository
and, with an ``#anchor``, a heading of that file (GitHub's slugs); every page of docs/ is linked from the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 160

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.S)
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans (neither holds links or headings)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation other than hyphens and underscores dropped, spaces to
    hyphens (inline markup reduced to its text first)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(_FENCE.sub("", path.read_text())):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(_prose(path.read_text()))
            if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)]  # http:, https:, mailto: ...


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` that name no file under ``root``, or no heading of the markdown file named."""
    problems = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            problems.append(f"{target}: no heading with the anchor #{anchor}")
    return problems


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; the limit is {MAX_README_LINES}: move text to docs/"


def test_readme_starts_with_the_fresh_machine_commands():
    top = "\n".join(README.read_text().splitlines()[:8])
    assert "`bash scripts/setup.sh && .venv/bin/python demo/offline_inference_tt.py`" in top
    assert "`bash scripts/test.sh`" in top
    for script in ("scripts/setup.sh", "scripts/test.sh", "demo/offline_inference_tt.py"):
        assert (ROOT / script).is_file(), script


def test_docs_exist():
    assert len(DOCS) >= 5, "docs/ holds the README's topics"
    assert any("#" in target for target in relative_links(README)), "anchors are checked on real links too"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_every_doc_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)}
    unlinked = [str(p.relative_to(ROOT)) for p in DOCS if p.resolve() not in linked]
    assert unlinked == [], f"not linked from README.md: {unlinked}"


def test_slugs_follow_github():
    assert slug("Offline inference: `tt_models.LLM`") == "offline-inference-tt_modelsllm"
    assert slug("Image+text extension (Llama 3.2 Vision)") == "imagetext-extension-llama-32-vision"
    assert slug("bench/decode_path.py") == "benchdecode_pathpy"
    assert slug("Decode-step bound") == "decode-step-bound"


def test_the_checker_finds_broken_links(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Same name\n\n## Same name\n\n```bash\n# not a heading\n```\n")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md) [ok](a.md#top) [ok](a.md#same-name-1) [ok](#here) [web](https://example.com/x.md)\n"
                   "`[in code](missing.md)`\n\n# Here\n\n[gone](missing.md) [bad](a.md#not-a-heading) "
                   "[out](../outside.md)\n")
    assert broken_links(doc, root=tmp_path) == [
        "missing.md: no such file",
        "a.md#not-a-heading: no heading with the anchor #not-a-heading",
        "../outside.md: no such file",
    ]
