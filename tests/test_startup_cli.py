"""``python -m engine run SCRIPT`` starts the script without building every command's parser
or importing what only other commands need (issue 24's start-up): the run command's parser is
the same one either way, and the script finds ``caffe`` as before.  Nothing here is timed."""
import os
import subprocess
import sys
from pathlib import Path

from engine.tools import cli

ROOT = Path(__file__).resolve().parents[1]

NOT_BEFORE_THE_SCRIPT = ("engine.tools.selftest", "engine.tools.port_commands", "importlib.abc",
                         "importlib.resources")


def test_run_parser_alone_is_the_full_parsers_run_command():
    full, alone = cli.make_parser(), cli.make_parser(only="run")
    assert set(alone.command_parsers) == {"run"}
    assert len(full.command_parsers) > 10
    a, b = full.command_parsers["run"], alone.command_parsers["run"]
    assert a.format_help() == b.format_help() and a.format_usage() == b.format_usage()
    argv = ["run", "script.py", "--model", "x", "-v"]
    assert vars(full.parse_args(argv)) == vars(alone.parse_args(argv))


def test_main_reports_a_run_without_script_as_before(capsys):
    assert cli.main(["run"]) == cli.EXIT_USAGE
    assert "usage error: run: a script (run SCRIPT ARGS...) or a module" in capsys.readouterr().err


def test_script_starts_without_the_other_commands_modules(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys\n"
                      "print('BEFORE', *[m for m in %r if m in sys.modules])\n"
                      "import caffe\n"
                      "print('CAFFE', caffe.Net.__module__, sys.argv[1:])\n" % (NOT_BEFORE_THE_SCRIPT,))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(script), "a", "--b"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    assert lines["BEFORE"] == []
    assert lines["CAFFE"][0].startswith("engine.")
    assert lines["CAFFE"][1:] == ["['a',", "'--b']"]
