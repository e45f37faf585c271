"""``--help`` as the guide has it: options under the guide's groups, and a pointer to the command's guide page.

Click has no option groups. An option made with :func:`grouped` carries its
group (one of :data:`gradcheck.settings.GROUPS`; an option of the settings
table takes its row's); :class:`GuideCommand` lists the options group by
group, in that order, and ends with the epilog naming the guide's page. The
guide's command-line reference (``tools/docs_reference.py``) lists them by
the same :func:`option_groups`, so the help and the guide cannot disagree.
"""

from __future__ import annotations

from typing import Any

import click

from gradcheck.settings import GROUPS

#: The widest option names that share the column with the help text (click's own default).
_WIDEST = 30

#: Where an option of no group is listed (``--help`` itself, ``init``'s own options).
OTHER = "Options"

#: Each command's pages of the guide, as paths in gradcheck's repository: its help ends with them.
GUIDE_PAGES: dict[str, tuple[str, str]] = {
    "gradcheck": ("docs/README.md", "docs/command-line.md"),
    "run": ("docs/checking.md", "docs/command-line.md#gradcheck-run"),
    "list": ("docs/getting-started.md#see-what-will-be-checked-gradcheck-list", "docs/command-line.md#gradcheck-list"),
    "init": ("docs/getting-started.md#a-first-config-gradcheck-init", "docs/command-line.md#gradcheck-init"),
}


def guide_epilog(command: str) -> str:
    """The last lines of ``command``'s help: its guide page and its options' reference."""
    page, reference = GUIDE_PAGES[command]
    return f"Guide: {page}\nEvery option: {reference}"


class GroupedOption(click.Option):
    """An option listed under a group of the help (``Selection``, ``Checking``, ...)."""

    def __init__(self, *args: Any, group: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = group


def grouped(group: str) -> dict[str, Any]:
    """The keyword arguments of ``click.option`` that put an option in ``group``."""
    if group not in GROUPS:
        raise ValueError(f"{group!r} is not one of the help's groups {GROUPS}")
    return {"cls": GroupedOption, "group": group}


def option_groups(command: click.Command, ctx: click.Context) -> list[tuple[str, list[click.Parameter]]]:
    """The options ``command``'s help shows, group by group in the order of :data:`GROUPS`, then the rest."""
    by_group: dict[str, list[click.Parameter]] = {}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            by_group.setdefault(getattr(param, "group", None) or OTHER, []).append(param)
    return [(group, by_group[group]) for group in (*GROUPS, OTHER) if group in by_group]


class GuideEpilog(click.Command):
    """A command (or group) whose help ends with its guide page, each line of the epilog as written."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Written as they are: click's rewrapping could break a long path across two lines.
        if self.epilog:
            formatter.write_paragraph()
            for line in self.epilog.splitlines():
                formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class GuideCommand(GuideEpilog):
    """A command whose help lists its options by group (:func:`option_groups`) and ends with its guide page."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections = [
            (group, [record for param in params if (record := param.get_help_record(ctx)) is not None])
            for group, params in option_groups(self, ctx)
        ]
        # One column for the options of every group, as click would give them in one list: click sizes
        # each list by its own widest option, so names shorter than the widest are padded to it.
        width = min(_WIDEST, max(len(name) for _, records in sections for name, _ in records))
        for group, records in sections:
            with formatter.section(group):
                formatter.write_dl([(name.ljust(width), text) for name, text in records], col_max=_WIDEST)
