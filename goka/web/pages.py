"""HTML of goka's web pages: one layout, escaped text, a little plain JavaScript for refresh.

Every page is rendered on the server with :func:`html.escape` applied to every value (keys and
values are written by whoever can write to a topic); the refresh script only ever assigns
``textContent``, never HTML. Nothing is loaded from elsewhere: styles and script are inline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from goka.web.tables import Response

__all__ = ["e", "html_page", "json_response", "table"]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#9cc3ff}
main{padding:16px 20px;max-width:1200px}
h1{font-size:18px;margin:0} h2{font-size:15px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;min-width:50%}
th,td{border:1px solid #d9dde3;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#eef0f3} td.n{text-align:right;font-variant-numeric:tabular-nums}
.state-running,.state-ok{color:#127a2b}.state-failed,.err{color:#b3261e}
.state-restoring,.state-rebuilding,.state-catching_up,.state-reconnecting{color:#a15c00}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:700px}
form{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin:8px 0}
input,select,button{font:inherit;padding:3px 6px}
svg{background:#fff;border:1px solid #d9dde3}
.muted{color:#667}
"""


def e(value: object) -> str:
    """``value`` as HTML text (escaped)."""
    return html.escape(str(value), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, ident: str = "",
          numeric: Sequence[int] = ()) -> str:  # fmt: skip
    """An HTML table of escaped cells; ``numeric`` columns are right-aligned."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="n">{e(c)}</td>' if i in numeric else f"<td>{e(c)}</td>"
            for i, c in enumerate(row)
        ) + "</tr>"
        for row in rows
    )  # fmt: skip
    attribute = f' id="{e(ident)}"' if ident else ""
    return f"<table{attribute}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(title: str, body: str, *, links: Sequence[tuple[str, str]] = (),
              script: str = "") -> Response:  # fmt: skip
    """A whole page: header with ``links`` (label, href), ``body`` (already escaped HTML)."""
    nav = " ".join(f'<a href="{e(href)}">{e(label)}</a>' for label, href in links)
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>{e(title)}</h1><nav>{nav}</nav></header><main>{body}</main>"
        f"<script>{script}</script></body></html>"
    )
    return Response(200, "text/html; charset=utf-8", page.encode())


def json_response(document: Any, status: int = 200) -> Response:
    return Response(status, "application/json", json.dumps(document, default=str).encode())


#: Refresh helpers shared by the monitor pages: fill a table body from rows of text, draw a
#: line chart of series into an <svg>.
REFRESH_JS = """
function fill(id, rows, numeric) {
  const body = document.querySelector('#' + id + ' tbody');
  if (!body) return;
  body.replaceChildren(...rows.map(row => {
    const tr = document.createElement('tr');
    row.forEach((cell, i) => {
      const td = document.createElement('td');
      td.textContent = cell === null || cell === undefined ? '' : String(cell);
      if (numeric.includes(i)) td.className = 'n';
      const states = /^(running|restoring|rebuilding|failed|idle|catching up|reconnecting)/;
      const state = typeof cell === 'string' && cell.match(states);
      if (state) td.className = 'state-' + state[1].replace(' ', '_');
      tr.appendChild(td);
    });
    return tr;
  }));
}
function chart(id, points, series) {
  const svg = document.getElementById(id);
  if (!svg || points.length < 2) return;
  const w = 600, h = 140, t0 = points[0].t, t1 = points[points.length - 1].t;
  const ns = 'http://www.w3.org/2000/svg';
  svg.replaceChildren();
  series.forEach(([key, color], k) => {
    const top = Math.max(1, ...points.map(p => p[key] || 0));
    const line = document.createElementNS(ns, 'polyline');
    line.setAttribute('fill', 'none'); line.setAttribute('stroke', color);
    line.setAttribute('points', points.map(p =>
      ((p.t - t0) / Math.max(1, t1 - t0) * (w - 10) + 5).toFixed(1) + ',' +
      (h - 5 - (p[key] || 0) / top * (h - 25)).toFixed(1)).join(' '));
    svg.appendChild(line);
    const label = document.createElementNS(ns, 'text');
    label.setAttribute('x', 8 + k * 200); label.setAttribute('y', 14);
    label.setAttribute('fill', color);
    label.textContent = key + ' (max ' + Math.round(top) + ')';
    svg.appendChild(label);
  });
}
function every(ms, url, update) {
  const tick = () => fetch(url).then(r => r.json()).then(update).catch(() => {});
  tick(); setInterval(tick, ms);
}
"""
