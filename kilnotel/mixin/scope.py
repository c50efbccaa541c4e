"""Scopes a dashboard query to the deployment: matchers on every selector, labels in
every ``by``.

The panels are written as for one deployment (``sum by (queue) (rate(kiln_x[...]))``);
``scoped()`` adds the config's selector and the deployment variables' matchers
(``namespace=~"$namespace", job=~"$job"``) to every series selector, and the deployment
labels to every ``by (...)``, so that with "All" selected two deployments are never
merged. A small scanner, not a parser: the panels' PromQL is plain enough (tests/ops
parses every result with the real PromQL grammar and runs it against Prometheus).
"""

from __future__ import annotations

import re

from kilnotel.mixin.config import Config

_TOKEN = re.compile(
    r'(?P<str>"(?:[^"\\]|\\.)*")'
    r"|(?P<by>\b(?:by|without)\s*\((?P<labels>[^)]*)\))"
    r"|(?P<braces>\{[^}]*\})"
    r"|(?P<range>\[[^\]]*\])"
    r"|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
)
_SERIES = re.compile(r"^(?:kiln[_:]|queue[a-z_]*:|up$)")


def matchers(c: Config, name: str) -> str:
    """What a selector of ``name`` gets: the deployment variables, and for a raw series
    (not a recorded one, which keeps only the labels it aggregates by) the selector.

    With the installation as the deployment (the default), a raw series does not carry
    it: it is scoped by ``$instance`` instead, whose values are the installation's
    targets (the dashboard's ``instance`` variable, chained to ``$kiln_installation``)."""
    deployment = ", ".join(f'{label}=~"${label}"' for label in c.deployment_labels)
    if ":" in name:
        return deployment
    scope = 'instance=~"$instance"' if c.joins else deployment
    return ", ".join(p for p in (c.selector, scope) if p)


def _is_series(expr: str, token: re.Match[str]) -> bool:
    if not _SERIES.match(token.group("name")):
        return False
    rest = expr[token.end():].lstrip()
    return not rest.startswith("(") and not re.match(r"^(=~|!~|!=|=(?!=))", rest)


def scoped(c: Config, expr: str) -> str:
    out: list[str] = []
    pos = 0
    tokens = list(_TOKEN.finditer(expr))
    for i, token in enumerate(tokens):
        out.append(expr[pos:token.start()])
        pos = token.end()
        text = token.group(0)
        if token.group("by") is not None:
            labels = [p.strip() for p in token.group("labels").split(",") if p.strip()]
            keep = [*c.deployment_labels, *(x for x in labels if x not in c.deployment_labels)]
            text = f"{text.split('(')[0].rstrip()} ({', '.join(keep)})"
        elif token.group("name") is not None and _is_series(expr, token):
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            if not (following is not None and following.group("braces") is not None
                    and expr[token.end():following.start()].strip() == ""):
                text = f"{text}{{{matchers(c, text)}}}"
        elif token.group("braces") is not None and i > 0 and tokens[i - 1].group("name"):
            previous = tokens[i - 1]
            if _is_series(expr, previous) or expr[previous.end():token.start()].strip() == "":
                inner = text[1:-1].strip()
                add = matchers(c, previous.group("name"))
                text = "{" + ", ".join(p for p in (add, inner) if p) + "}"
        out.append(text)
    out.append(expr[pos:])
    return "".join(out)
