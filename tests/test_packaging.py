"""What CI users copy: the GitHub Actions workflow, the pre-commit hook, completion, --version.

The guide's CI page (docs/ci.md) shows docs/github-workflow.yml and
docs/pre-commit-config.yaml verbatim; these tests read those files and run
the gradcheck command lines in them, so the samples are exactly what is tested.
"""

from __future__ import annotations

import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gradcheck.cli import main
from tests import mini_yaml
from tests.helpers import REPO, invoke

README = (REPO / "README.md").read_text(encoding="utf-8")
CI_PAGE = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")


def _sample(name: str) -> str:
    text = (REPO / name).read_text(encoding="utf-8")
    assert text in CI_PAGE, f"docs/ci.md must show {name} verbatim"
    return text


def _gradcheck_args(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[:2] == ["gradcheck", "run"], command
    return words[1:]


def _copy_examples(project: Path) -> None:
    shutil.copytree(REPO / "examples", project / "examples")


def test_the_readme_workflow_runs_as_written(project: Path) -> None:
    workflow: Any = mini_yaml.loads(_sample("docs/github-workflow.yml"))
    steps = workflow["jobs"]["gradcheck"]["steps"]
    runs = [step["run"] for step in steps if "run" in step]
    install, check = runs
    # The install step is the README's own set-up command.
    assert install in README and install.startswith("python3 -m pip install")
    upload = next(step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"  # the JUnit file is uploaded when the check fails too

    _copy_examples(project)
    summary = project / "summary.md"
    result = invoke(*_gradcheck_args(check), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # nothing to annotate: every gradient is right
    junit = ET.parse(project / upload["with"]["path"]).getroot()
    assert junit.tag == "testsuites" and int(junit.get("tests", "0")) >= 2 and junit.get("failures") == "0"
    assert summary.read_text().startswith("## gradcheck: ")


def test_the_workflow_annotates_the_broken_example(project: Path) -> None:
    workflow: Any = mini_yaml.loads(_sample("docs/github-workflow.yml"))
    check = [step["run"] for step in workflow["jobs"]["gradcheck"]["steps"] if "run" in step][-1]
    args = [arg if arg != "examples/matmul" else "examples/broken" for arg in _gradcheck_args(check)]
    _copy_examples(project)
    result = invoke(*args)
    assert result.exit_code == 1
    annotations = result.stdout.splitlines()
    assert len(annotations) == 10 and all(
        line.startswith("::error file=examples/broken/broken_ops.py,line=") for line in annotations
    )
    failures = ET.parse(project / "gradcheck-junit.xml").getroot()
    assert (failures.get("tests"), failures.get("failures")) == ("7", "6")


def test_the_pre_commit_hook(project: Path) -> None:
    (hook,) = mini_yaml.loads((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "gradcheck" and hook["entry"] == "gradcheck run" and hook["language"] == "python"
    assert hook["pass_filenames"] is False and hook["types_or"] == ["python", "toml"]
    config: Any = mini_yaml.loads(_sample("docs/pre-commit-config.yaml"))
    (local,) = config["repos"][0]["hooks"]
    # The guide's local hook runs what the published hook runs.
    for key in ("id", "entry", "types_or", "pass_filenames", "args"):
        assert local[key] == hook[key], key
    # pre-commit runs `entry args` with no file names: do the same in a project.
    command = _gradcheck_args(" ".join([local["entry"], *local["args"]]))
    shutil.copytree(REPO / "examples" / "matmul", project / "examples" / "matmul")
    passing = invoke(*command)
    assert passing.exit_code == 0, passing.output
    assert len(passing.stdout.strip().splitlines()) == 1  # -q: the summary line alone
    shutil.copytree(REPO / "examples" / "broken", project / "examples" / "broken")
    failing = invoke(*command)
    assert failing.exit_code == 1  # the commit is stopped
    assert "FAILED  examples/broken/broken_ops.py::matmul_missing_transpose" in failing.stdout


def test_shell_completion_scripts() -> None:
    for shell, marker in (("bash", "_gradcheck_completion"), ("zsh", "#compdef gradcheck"), ("fish", "complete")):
        result = CliRunner().invoke(main, [], prog_name="gradcheck", env={"_GRADCHECK_COMPLETE": f"{shell}_source"})
        assert result.exit_code == 0
        assert marker in result.stdout, shell
    documented = "_GRADCHECK_COMPLETE=bash_source gradcheck"
    assert documented in (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")


def test_completion_offers_commands_and_options() -> None:
    env = {"_GRADCHECK_COMPLETE": "bash_complete", "COMP_WORDS": "gradcheck ", "COMP_CWORD": "1"}
    commands = CliRunner().invoke(main, [], prog_name="gradcheck", env=env)
    assert {"plain,run", "plain,list", "plain,init"} <= set(commands.stdout.split())
    env = {"_GRADCHECK_COMPLETE": "bash_complete", "COMP_WORDS": "gradcheck run --fo", "COMP_CWORD": "2"}
    options = CliRunner().invoke(main, [], prog_name="gradcheck", env=env)
    assert "plain,--format" in options.stdout.split()


def test_version() -> None:
    assert invoke("--version").stdout.strip() == "gradcheck, version 0.1.0"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"```sh\n{ci}\n```" in README
    assert f"```sh\n{ci}\n```" in (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_the_no_deps_tf_keras_matches_the_installed_tensorflow() -> None:
    # tf-keras is installed with --no-deps (its own requirement is the full tensorflow wheel), so
    # pip never checks it against tensorflow-cpu: a TensorFlow upgrade must move its pin too.
    from importlib.metadata import PackageNotFoundError, version

    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    pinned = next(word.split("==")[1] for word in shlex.split(ci) if word.startswith("tf-keras=="))
    try:
        tensorflow = version("tensorflow-cpu")
    except PackageNotFoundError:
        tensorflow = version("tensorflow")
    assert pinned.split(".")[:2] == tensorflow.split(".")[:2], (pinned, tensorflow)
