"""Cost of filtering one ``tools/list`` answer (weir.xds.mcp_list), per answer size.

Runs the script Envoy runs, under LuaJIT (lupa: the engine Envoy embeds), on
answers of 10 to 1,000 tools with realistic schemas, JSON and SSE, with a
policy denying a tenth of them. Reference, measured in the same run on the
same bytes: CPython's C ``json.loads`` of the body (what a client does with
the answer anyway). Prints microseconds per answer and the ratio; Envoy's
own copy of the buffered body is not included.

    PYTHONPATH=src python bench/mcp_list.py
"""

from __future__ import annotations

import json
import time
from typing import Any

import lupa.luajit21 as luajit

from weir import ir
from weir.xds import mcp_list


def listing(count: int) -> str:
    tools = [
        {
            "name": f"tool_{i}",
            "description": f"Does thing {i} with the given arguments, and reports what it did.",
            "inputSchema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "depth": {"type": "integer", "minimum": 0}},
                "required": ["path"],
            },
        }
        for i in range(count)
    ]
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": tools}})


def best(fn: Any, rounds: int) -> float:
    """Microseconds per call of ``fn``: the best of 5 runs of ``rounds`` calls (CPU time, as os.clock)."""
    samples = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(rounds):
            fn()
        samples.append((time.process_time() - start) / rounds)
    return min(samples) * 1e6


def main() -> None:
    runtime = luajit.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(mcp_list.script().replace("local function filter_body", "function filter_body"))
    filter_body = runtime.globals().filter_body
    runtime.execute(
        """
        function timed(media, text, rules, n)
          local start = os.clock()
          for _ = 1, n do filter_body(200, media, "identity", text, rules) end
          return (os.clock() - start) / n * 1e6
        end
        """
    )
    timed = runtime.globals().timed
    rules = mcp_list._policy_rules(ir.McpToolPolicy(allowed=("tool_*",), denied=("tool_*0",)))
    print(f"{'tools':>6} {'kind':>5} {'bytes':>8} {'script µs':>10} {'json.loads µs':>14} {'ratio':>6}")
    for count in (10, 100, 1000):
        body = listing(count)
        for kind, media, text in (
            ("json", "application/json", body),
            ("sse", "text/event-stream", f"event: message\ndata: {body}\n\n"),
        ):
            out, removed, listed = filter_body(200, media, "identity", text, rules)
            assert out is not None and listed == count and len(list(removed.values())) == count // 10
            rounds = max(3, 20000 // count)
            # Timed inside Lua: a call from Python through lupa costs more than the script's own work.
            script = min(timed(media, text, rules, rounds) for _ in range(5))
            reference = best(lambda body=body: json.loads(body), rounds)  # type: ignore[misc]
            ratio = script / reference
            print(f"{count:>6} {kind:>5} {len(text):>8} {script:>10.1f} {reference:>14.1f} {ratio:>6.1f}")


if __name__ == "__main__":
    main()
