"""Help texts at 80 columns: every flag name printed in full, no line wider than the terminal, every
flag has a help text, and search's layout flags say that they filter."""
import pytest
import typer.main

from vtrain.cli.app import _register_commands, app


def _commands():
    _register_commands()
    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):  # a group (typer vendors click: duck typing)
            out += [((name, sub), subcmd) for sub, subcmd in cmd.commands.items()]
        else:
            out.append(((name,), cmd))
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_fits_80_columns_with_full_flag_names(path, command, cli):
    result = cli(*path, "--help", env={"COLUMNS": "80", "TERM": "xterm-256color"})
    assert result.returncode == 0, result.stderr
    text = result.stdout
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
    assert "…" not in text
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            for flag in param.opts + param.secondary_opts:
                assert flag in text, f"{' '.join(path)}: {flag} missing or cut in --help"
            assert param.help, f"{' '.join(path)}: {param.opts[0]} has no help text"


def test_search_layout_flags_say_they_filter():
    search = dict(COMMANDS)[("search",)]
    helps = {p.name: p.help for p in search.params}
    for name in ("tp", "pp", "dp", "micro_batch", "recompute", "zero_stage"):
        assert helps[name].startswith("Only"), (name, helps[name])
    predict = dict(COMMANDS)[("predict",)]
    assert {p.name: p.help for p in predict.params}["tp"] == "Tensor-parallel degree."
