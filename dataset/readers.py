"""Tolerant readers for upstream files: CSV (BOM, CRLF, stray spaces) and protobuf text format."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from vtrain.costmodel.errors import UserError


def read_csv(path: str | Path, required: list[str] | tuple[str, ...], fmt: str, **kwargs) -> pd.DataFrame:
    """A CSV with a header row; raises UserError naming the file and the first missing column."""
    try:
        df = pd.read_csv(path, encoding="utf-8-sig", skipinitialspace=True, **kwargs)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise UserError(f"{path}: cannot read as {fmt} CSV ({str(err).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    for col in required:
        if col not in df.columns:
            raise UserError(f"{path}: missing column '{col}' for format {fmt}")
    return df


def read_headerless_csv(path: str | Path, ncols: int, fmt: str) -> list[list[str]]:
    """Rows of a header-less CSV as stripped strings; raises UserError if a row has fewer than `ncols` fields."""
    rows = []
    text = Path(path).read_text(encoding="utf-8-sig")
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < ncols:
            raise UserError(f"{path}: line {lineno} has {len(cells)} fields, expected {ncols} for format {fmt}")
        rows.append(cells)
    return rows


_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}:])|([^\s{}:"#]+))')


def parse_textproto(text: str) -> dict:
    """Parse protobuf text format into nested dicts; every field maps to a list of values."""
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            break
        pos = match.end()
        comment, string, punct, word = match.groups()
        if comment is not None:
            continue
        if string is not None:
            tokens.append(("str", string[1:-1]))
        elif punct is not None:
            tokens.append((punct, punct))
        elif word is not None:
            tokens.append(("word", word))

    def message(i: int) -> tuple[dict, int]:
        out: dict = {}
        while i < len(tokens) and tokens[i][0] != "}":
            name = tokens[i][1]
            i += 1
            if tokens[i][0] == ":":
                i += 1
            if tokens[i][0] == "{":
                value, i = message(i + 1)
                i += 1  # closing brace
            else:
                kind, raw = tokens[i]
                i += 1
                value = raw if kind == "str" else _scalar(raw)
            out.setdefault(name, []).append(value)
        return out, i

    return message(0)[0]


def _scalar(raw: str):
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw
