"""The documentation stays true: the CLI reference matches the parser, and links resolve.

``docs/cli.md`` holds a generated section, between the two markers below, rendered from
``flows.cli.build_parser()`` by :func:`render_reference` (one table per command: every
argument, its default, its choices, its help). After changing the command line, rewrite it
with ``.venv/bin/python tests/test_docs_cli.py``; the test fails until then.

The rendering reads the parser's actions, not ``format_help()``: argparse's help layout
depends on the terminal width and changes between Python versions, the actions do not.

The second test reads every markdown link of ``README.md``, ``BENCHMARKS.md`` and
``docs/*.md`` and fails on a target that does not exist in the repository, on one that
leaves it (``../`` out of the root, an absolute path) and on any ``http(s)`` link.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI_DOC = REPO / "docs" / "cli.md"
BEGIN = (
    "<!-- BEGIN GENERATED: tests/test_docs_cli.py renders this from flows.cli.build_parser() -->"
)
END = "<!-- END GENERATED -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.default is None or action.default is argparse.SUPPRESS:
        return ""
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return ""
    if isinstance(action.default, list | tuple):
        return ", ".join(str(v) for v in action.default)
    return str(action.default)


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.dest
    names = ", ".join(action.option_strings)
    takes_value = action.nargs != 0
    return f"{names} {action.metavar or action.dest.upper()}" if takes_value else names


def render_reference() -> str:
    """The generated section: one heading and one table per ``recrawl`` command."""
    from flows.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    out = [BEGIN, ""]
    for name in sorted(sub.choices):
        command = sub.choices[name]
        out += [f"### `recrawl {name}`", "", _cell(helps.get(name, "")) + ".", ""]
        out += ["| argument | default | choices | what |", "|---|---|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = action.help or ""
            if "%(" in text:
                text = text % {**vars(action), "prog": command.prog}
            choices = ", ".join(str(c) for c in action.choices) if action.choices else ""
            repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
            out.append(
                f"| `{_cell(_name(action))}` | {_cell(_default(action))} | {_cell(choices)} "
                f"| {_cell(text)}{repeat} |"
            )
        out.append("")
    out.append(END)
    return "\n".join(out)


def current_section() -> str:
    text = CLI_DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def rewrite() -> None:
    text = CLI_DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    CLI_DOC.write_text(text[:start] + render_reference() + text[end:])


def test_the_cli_reference_is_the_parser():
    assert current_section() == render_reference(), (
        "docs/cli.md is out of date: run `.venv/bin/python tests/test_docs_cli.py`"
    )


def test_the_reference_names_every_command():
    # a rendering that lost commands would still equal itself: check it against the parser
    from flows.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    section = current_section()
    assert len(sub.choices) >= 10
    for name in sub.choices:
        assert f"### `recrawl {name}`" in section


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def link_problems(path: Path) -> list[str]:
    """Every link of ``path`` that is external, leaves the repository or names no file."""
    problems = []
    in_code = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1)
            where = f"{path.relative_to(REPO)}:{number}: {target}"
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                problems.append(f"{where} (leaves the repository)")
                continue
            file_part = target.split("#", 1)[0]
            if not file_part:
                continue  # an anchor in the same page
            if file_part.startswith("/"):
                problems.append(f"{where} (absolute path)")
                continue
            resolved = (path.parent / file_part).resolve()
            if not resolved.is_relative_to(REPO):
                problems.append(f"{where} (outside the repository)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
    return problems


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_link_of_the_docs_resolves_inside_the_repository():
    problems = [p for doc in documents() for p in link_problems(doc)]
    assert not problems, "\n".join(problems)


def test_the_link_check_finds_bad_links(tmp_path, monkeypatch):
    # the check itself: a missing file, a way out, an http link; a good link passes
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "there.md").write_text("x")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md#a) [gone](missing.md) [out](../x.md) [web](https://example.org)\n"
        "```\n[in code](missing.md)\n```\n"
    )
    found = link_problems(doc)
    assert len(found) == 3, found
    assert "missing.md (no such file)" in found[0]
    assert "outside the repository" in found[1]
    assert "leaves the repository" in found[2]


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    rewrite()
    print(f"rewrote the generated section of {CLI_DOC.relative_to(REPO)}")
