"""What vulture cannot see being used: names that are called from outside gradcheck's own code.

``python -m vulture gradcheck tests/vulture_whitelist.py --min-confidence 60`` must report
nothing (``tests/test_architecture.py`` runs it). Only entry points belong here, each with
who calls it; anything else vulture finds is dead code to remove, or a test helper to move
into the tests. The module is importable: the test imports it, so an entry renamed or
removed in gradcheck fails here instead of lingering.
"""

from __future__ import annotations

from gradcheck import api, cli, pytest_plugin
from gradcheck.cli import help as cli_help
from gradcheck.worker import process, server

_ENTRY_POINTS = (
    # Click commands: click calls them when the user types ``gradcheck run`` / ``list`` / ``init``.
    cli.run,
    cli.list_,
    cli.init,
    # pytest hooks: pytest finds them by name on the plugin module (the ``pytest11`` entry point
    # in pyproject.toml) and on the plugin object ``pytest_configure`` registers.
    pytest_plugin.pytest_addoption,
    pytest_plugin.pytest_configure,
    pytest_plugin.GradcheckPlugin.pytest_collect_file,
    pytest_plugin.GradcheckPlugin.pytest_runtest_makereport,
    # pytest's node protocol: pytest calls these on the collector and item gradcheck yields.
    pytest_plugin.GradcheckModule.collect,
    pytest_plugin.GradcheckItem.runtest,
    pytest_plugin.GradcheckItem.reportinfo,
    # The worker process's main: the parent starts ``python -c "from gradcheck.worker.server import serve; serve()"``.
    server.serve,
    # click.Command's help hooks: click calls them to write ``--help`` (options by group, the guide page).
    cli_help.GuideEpilog.format_epilog,
    cli_help.GuideCommand.format_options,
    # Registered with ``atexit``: Python calls it at exit, to close the idle worker kept for a next run.
    process.close_idle_worker,
    # Read by ``inspect.signature`` (``help()``, editors): ``check``'s settings keywords spelt out.
    api.check.__signature__,  # type: ignore[attr-defined]
)
