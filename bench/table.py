"""The tables of BENCHMARKS.md that hold figures, written from the results files in bench/results/.

    .venv/bin/python bench/table.py            # rewrite every block between its markers in BENCHMARKS.md
    .venv/bin/python bench/table.py --check    # exit 1, saying which block differs, when the page is not up to date

A results file is one run's --json of a bench/ script (bench/provenance.py puts the commit, the command, the date
and a note about the machine at its top). Each block of the page sits between `<!-- table: NAME -->` and
`<!-- end table: NAME -->` and is written here alone: the standing table (each goal, today's figure, met or not,
the commit and the command of the run it comes from) and one table per topic. To bring a figure up to date, run
the command shown in its row again with `--json bench/results/<file>`, then this script, and commit the three.
tests/unit/test_bench_table.py fails when the page differs from what this script makes of the checked-in files.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "BENCHMARKS.md"

Results = dict[str, dict]  # file name (without .json) -> its document


class NoFigure(Exception):
    """The results file lacks what a goal or a table needs (a step skipped, a relay that failed)."""


def k(records_s: float) -> str:
    return f"{records_s / 1000:.1f}k"


def doc(res: Results, name: str) -> dict:
    if name not in res:
        raise NoFigure(f"no bench/results/{name}.json")
    return res[name]


REPEATED = "one repeated byte"  # bench/run.py's rows of the older benchmarks' values: shown, never judged
SUSTAINED = 1_000_000  # records a throughput run needs before its rate is more than its start-up (issue 33)


def size_row(d: dict, size: int) -> dict:
    """The throughput row of `size`-byte values as users send them (bench/data.py), from a sustained run."""
    if d.get("records", 0) < SUSTAINED:
        raise NoFigure(f"a run of {d.get('records', 0):,} records measures the relays' start-up; {SUSTAINED:,} needed")
    rows = [r for r in d.get("throughput", []) if r["value_bytes"] == size]
    for row in rows:
        if row.get("values") != REPEATED:
            return row
    raise NoFigure(f"only values of one repeated byte at {size} B" if rows else f"no {size} B throughput run")


def rate(r: dict) -> float:
    if "records_s" not in r:
        raise NoFigure(r.get("error", "no rate"))
    return float(r["records_s"])


# ---- the goals: each reads one results file and gives today's figure and whether it meets the goal


def gateway_vs_exact_relay(size: int) -> Callable[[dict], tuple[str, bool]]:
    def measure(d: dict) -> tuple[str, bool]:
        row = size_row(d, size)
        g, c = row.get("gateway1", {}), row.get("c_relay_idempotent", {})
        if "ratio_to_c_relay_idempotent" not in g:
            raise NoFigure("no idempotent C relay in this run")
        ratio, steady = g["ratio_to_c_relay_idempotent"], g.get("steady_ratio_to_c_relay_idempotent")
        figure = f"{ratio:.2f}x ({k(rate(g))}/s against {k(rate(c))}/s"
        figure += f"; after its first record {steady:.2f}x)" if steady else ")"
        return figure, ratio >= 0.9

    return measure


def wan_points(d: dict, rtt: float, partitions: int) -> list[dict]:
    rows = [r for r in d.get("sweep", []) if r["rtt_ms"] == rtt and r["partitions"] == partitions]
    if not rows:
        raise NoFigure(f"no {rtt:g} ms point with {partitions} partitions")
    return rows


def gateway_vs_exact_relay_wan(d: dict) -> tuple[str, bool]:
    """At 50 ms, 4 partitions: the gateway at least the idempotent C relay through the same line, and at least 0.9x
    its own rate at 0 ms (issue 28), each the median of the rounds, whole runs."""
    at50, at0 = wan_points(d, 50, 4), wan_points(d, 0, 4)
    g50 = statistics.median(rate(r["gateway"]) for r in at50)
    c50 = statistics.median(rate(r["c_relay"]) for r in at50)
    g0 = statistics.median(rate(r["gateway"]) for r in at0)
    steady = [
        r["gateway"]["steady_records_s"] / rate(r["c_relay"]) for r in at50 if r["gateway"].get("steady_records_s")
    ]
    steady50 = [r["gateway"]["steady_records_s"] for r in at50 if r["gateway"].get("steady_records_s")]
    steady0 = [r["gateway"]["steady_records_s"] for r in at0 if r["gateway"].get("steady_records_s")]
    figure = (
        f"{g50 / c50:.2f}x the C relay ({k(g50)}/s against {k(c50)}/s; after its first record"
        f" {statistics.median(steady):.2f}x), {g50 / g0:.2f}x itself at 0 ms ({k(g0)}/s)"
        if steady
        else f"{g50 / c50:.2f}x the C relay ({k(g50)}/s against {k(c50)}/s), {g50 / g0:.2f}x itself at 0 ms"
    )
    if steady50 and steady0:
        # Not the criterion (whole runs are): a run of 200,000 records holds the resume and the start in its rate.
        figure += f"; after the first record {statistics.median(steady50) / statistics.median(steady0):.2f}x itself"
    return figure, g50 >= c50 and g50 >= 0.9 * g0


def resume_across_wan(d: dict) -> tuple[str, bool]:
    rows = wan_points(d, 50, 4)
    firsts = [r["gateway"]["first_record_s"] for r in rows if r["gateway"].get("first_record_s") is not None]
    if not firsts:
        raise NoFigure("no first record seen")
    target = 0.5 + 3 * 0.050
    return f"{' / '.join(f'{x:.2f}' for x in firsts)} s (target {target:.2f} s)", max(firsts) <= target


def resume(d: dict) -> tuple[str, bool]:
    runs = ", ".join(f"{x:.3f}" for x in d["runs_s"])
    return f"median {d['median_s']:.3f} s, max {d['max_s']:.3f} s ({runs})", d["median_s"] <= d["target_s"]


def latency(d: dict) -> tuple[str, bool]:
    if "latency" not in d:
        raise NoFigure("latency step skipped")
    gw, floor = d["latency"]["gateway"], d["latency"]["floor"]
    figure = f"p99 {gw['p99_ms']:.0f} ms, p50 {gw['p50_ms']:.0f} ms (one broker alone: p99 {floor['p99_ms']:.0f} ms)"
    return figure, gw["p99_ms"] <= 50 and gw["received"] == gw["sent"]


def failover(d: dict) -> tuple[str, bool]:
    if "failover" not in d:
        raise NoFigure("failover step skipped")
    fo = d["failover"]
    bad = fo["lost"] + fo["doubled"] + fo["misplaced"]
    figure = (
        f"{fo['seconds_to_next_record']:.1f} s with a {fo['session_timeout_s']:g} s session (the broker's join:"
        f" {fo['broker_join_wait_s']:.1f} s); {fo['records']:,} records: {fo['lost']} lost, {fo['doubled']} doubled,"
        f" {fo['misplaced']} misplaced"
    )
    return figure, fo["seconds_to_next_record"] <= fo["session_timeout_s"] + 2 and bad == 0


def handoff_planned_noida(d: dict) -> tuple[str, bool]:
    rows = [r for r in d["runs"] if r["broker"] == "noida" and r["signal"] == "SIGTERM"]
    if not rows or rows[0]["seconds_to_next_record"] is None:
        raise NoFigure("no noida-db planned stop that moved")
    s = rows[0]["seconds_to_next_record"]
    return f"{s:.2f} s (the broker's join: {rows[0]['broker_join_s']:.2f} s)", s <= 3


def handoff_exact(d: dict) -> tuple[str, bool]:
    runs = d["runs"]
    bad = sum(r["lost"] + r["doubled"] + r["misplaced"] for r in runs)
    total = sum(r["records"] for r in runs)
    kinds = ", ".join(sorted({f"{r['broker']} {r['signal']}" for r in runs}))
    return f"{bad} wrong of {total:,} records ({kinds})", bad == 0 and bool(runs)


def copystream(d: dict) -> tuple[str, bool]:
    cs = d.get("copystream")
    if not cs or "error" in cs:
        raise NoFigure((cs or {}).get("error", "copystream step skipped"))
    ceiling = (cs["plain_producer_rps_before"] + cs["plain_producer_rps_after"]) / 2
    figure = (
        f"{cs['ratio']:.2f}x ({k(cs['copystream_rps'])}/s against {k(ceiling)}/s;"
        f" Spark start-up {cs['spark_startup_seconds']:.1f} s apart)"
    )
    return figure, cs["ratio"] >= 0.7


def cli_help(d: dict) -> tuple[str, bool]:
    if "cli" not in d:
        raise NoFigure("cli step skipped")
    return f"{d['cli']['help_s']:.3f} s (`stream info` {d['cli']['stream_info_s']:.3f} s)", d["cli"]["help_s"] <= 0.3


def gateway_rss(d: dict) -> tuple[str, bool]:
    peaks = [
        (r[g]["peak_rss_MB"], r["value_bytes"])
        for r in d.get("throughput", [])
        for g in r
        if g.startswith(("gateway", "workers")) and r[g].get("peak_rss_MB")
    ]
    if not peaks:
        raise NoFigure("no gateway row")
    top, size = max(peaks)
    return f"{top:.0f} MB at most ({size} B records)", top <= 300


def idle_at_800(d: dict) -> tuple[str, bool]:
    rows = [r for r in d["sizes"] if r["partitions"] == 800 and "idle_cpu_pct" in r]
    if not rows:
        raise NoFigure("no 800-partition size")
    c = rows[0]["idle_cpu_pct"]
    worst = max(c["gateways"], c["source"], c["destination"])
    return f"{c['gateways']:.1f} / {c['source']:.1f} / {c['destination']:.1f} %", worst <= 2


def wake_at_800(d: dict) -> tuple[str, bool]:
    rows = [r for r in d["sizes"] if r["partitions"] == 800 and r.get("wake_ms")]
    if not rows:
        raise NoFigure("no wakes at 800 partitions")
    w = rows[0]["wake_ms"]
    p50 = statistics.median(w)
    return f"p50 {p50:.0f} ms, max {max(w):.0f} ms ({len(w)} wakes)", p50 < 100


@dataclass(frozen=True)
class Goal:
    what: str  # the promise, with where it is stated
    results: str  # its results file, bench/results/<results>.json
    measure: Callable[[dict], tuple[str, bool]]
    section: str  # the heading of BENCHMARKS.md that explains it


GOALS = [
    Goal(
        "gateway ≥ 0.9x the fastest exact relay (the idempotent C relay) of the same run, 100 B (design)",
        "run",
        gateway_vs_exact_relay(100),
        "throughput-by-record-size",
    ),
    Goal(
        "the same, 1 KiB (design)",
        "run",
        gateway_vs_exact_relay(1024),
        "throughput-by-record-size",
    ),
    Goal(
        "at a 50 ms round trip to the source, 1 KiB, 4 partitions: gateway ≥ the idempotent C relay through the"
        " same line and ≥ 0.9x itself at 0 ms (design, issue 28)",
        "wan",
        gateway_vs_exact_relay_wan,
        "across-a-wan",
    ),
    Goal(
        "`replica resume` to the first record ≤ 0.5 s + 3 round trips, at 50 ms (issue 28)",
        "wan",
        resume_across_wan,
        "across-a-wan",
    ),
    Goal(
        "`replica resume` to the first record ≤ 0.5 s, Tansu (issue 6)",
        "resume-tansu",
        resume,
        "resume-to-the-first-record",
    ),
    Goal(
        "`replica resume` to the first record ≤ 0.5 s, noida-db (issue 6)",
        "resume-noida",
        resume,
        "resume-to-the-first-record",
    ),
    Goal(
        "latency through a gateway: p99 ≤ 50 ms at 5,000 records/s (issue 6)",
        "run",
        latency,
        "latency-and-failover",
    ),
    Goal(
        "failover ≤ session + 2 s after a SIGKILL, nothing lost or doubled (issue 6)",
        "run",
        failover,
        "latency-and-failover",
    ),
    Goal(
        "a planned stop hands a partition over in ≤ 3 s, noida-db (issue 6)",
        "handoff",
        handoff_planned_noida,
        "handoff",
    ),
    Goal(
        "every record once across a planned stop and a crash, both brokers (issue 6)",
        "handoff",
        handoff_exact,
        "handoff",
    ),
    Goal(
        "idle CPU ≤ 2 % of a core each (gateway / source / destination broker) at 800 partitions (issue 15)",
        "scale",
        idle_at_800,
        "scale-and-idle-cost",
    ),
    Goal(
        "an idle partition woken within tens of ms at 800 partitions (issue 15)",
        "scale",
        wake_at_800,
        "scale-and-idle-cost",
    ),
    Goal(
        "copystream ≥ 0.7x a plain producer, Spark start-up apart (issue 6)",
        "run",
        copystream,
        "copystream-and-the-command-line",
    ),
    Goal("`streamrepl --help` ≤ 0.3 s (issue 6)", "run", cli_help, "copystream-and-the-command-line"),
    Goal("gateway RSS ≤ 300 MB during the throughput runs (issue 6)", "run", gateway_rss, "throughput-by-record-size"),
]


def commit_of(d: dict) -> str:
    return f"{d['commit']}+changes" if d.get("dirty") else d["commit"]


def command_of(d: dict) -> str:
    """The command as typed, without its --note (shown apart, under the table)."""
    args = shlex.split(d["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return shlex.join(out)


def standing(res: Results) -> list[str]:
    lines = [
        "| goal | today's figure | met? | commit | command |",
        "|---|---|---|---|---|",
    ]
    for g in GOALS:
        try:
            d = doc(res, g.results)
            figure, met = g.measure(d)
            verdict = "met" if met else "**missed**"
            where = f"{commit_of(d)}, {d['date'][:10]}"
            cmd = f"`{command_of(d)}`"
        except NoFigure as e:
            figure, verdict, where, cmd = f"no figure: {e}", "-", "-", "-"
        lines.append(f"| {g.what} ([more](#{g.section})) | {figure} | {verdict} | {where} | {cmd} |")
    lines += ["", "| results file | date | commit | machine |", "|---|---|---|---|"]
    for name in sorted(res):
        d = res[name]
        m = d.get("machine", {})
        about = f"{m.get('nproc')} cores, {m.get('cpu')}, Python {m.get('python')}"
        about += f"; {d['note']}" if d.get("note") else ""
        lines.append(f"| [{name}.json](bench/results/{name}.json) | {d['date']} | {commit_of(d)} | {about} |")
    return lines


# ---- the tables of the sections


def throughput(res: Results) -> list[str]:
    d = doc(res, "run")
    rounds = d.get("rounds", 1)
    made = [x for x in d.get("data", []) if x.get("lz4_ratio")]
    repeated = [r for r in d["throughput"] if r.get("values") == REPEATED]
    data = (
        f"Values: {made[0]['generator']} (seed {made[0]['seed']}; lz4 takes them "
        + ", ".join(f"{x['lz4_ratio']}:1 at {x['value_bytes']:,} B" for x in made)
        + f"; written with {made[0]['producer_compression']}), and in the rows marked so one repeated byte"
        " (written uncompressed)."
        if made
        else "Values: one repeated byte."
    )
    lines = [
        f"{d['records']:,} records a run, {d['partitions']} partitions, Tansu; the median of {rounds} rounds"
        " (each round runs every relay once,",
        "in turn"
        + "".join(f"; the {r['value_bytes']:,} B repeated-byte row {r.get('rounds', rounds)}" for r in repeated)
        + "). Ratios are the medians of each round's own ratio. Every relay is timed from its start of work to",
        "the destination holding the last record, read from outside.",
        data,
        "",
        "| size | relay | records/s | MB/s | x ceiling | x idempotent C relay | after the first record |"
        " CPU µs a record, own + brokers | rounds (records/s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    labels = [
        ("ceiling", "plain producer (ceiling)"),
        ("c_relay_idempotent", "idempotent C relay (yardstick)"),
        ("c_relay", "C relay"),
        ("hand_written", "hand-written loop"),
        ("kcat", "kcat \\| kcat"),
    ]
    for row in d["throughput"]:
        size = f"{row['value_bytes']:,} B" + (f", {REPEATED}" if row.get("values") == REPEATED else "")
        gws = [(g, f"gateway, {g[7:]} process{'' if g[7:] == '1' else 'es'}") for g in row if g.startswith("gateway")]
        gws += [(g, f"`gateway start -workers {g[7:]}`") for g in row if g.startswith("workers")]
        for key, label in labels + gws:
            r = row.get(key)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {size} | {label} | - | - | - | - | - | - | {r['error'].replace('|', '/')} |")
                continue
            x_ce = "1.00" if key == "ceiling" else f"{r['ratio_to_ceiling']:.2f}"
            x_ci = f"{r['ratio_to_c_relay_idempotent']:.2f}" if "ratio_to_c_relay_idempotent" in r else ""
            steady = f"{k(r['steady_records_s'])}/s" if r.get("steady_records_s") else ""
            cpu = f"{r['relay_cpu_us']} + {r['brokers_cpu_us']}" if "relay_cpu_us" in r else ""
            rnds = " / ".join(k(x) if x else "-" for x in r.get("rounds_records_s", []))
            lines.append(
                f"| {size} | {label} | {r['records_s']:,} | {r['MB_s']} | {x_ce} | {x_ci} | {steady} | {cpu} | {rnds} |"
            )
    return lines


def latency_failover(res: Results) -> list[str]:
    d = doc(res, "run")
    lines = ["| what | figure |", "|---|---|"]
    for key, label in (("floor", "produce → consume on one broker (the floor)"), ("gateway", "through a gateway")):
        lat = d.get("latency", {}).get(key)
        if lat:
            lines.append(
                f"| {label}, {lat['rate_achieved']:,}/s for {lat['seconds']:.0f} s | p50 {lat['p50_ms']} ms,"
                f" p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms; {lat['received']:,} of {lat['sent']:,} received |"
            )
    if "failover" in d:
        lines.append(f"| failover: SIGKILL of the gateway owning partition 0 | {failover(d)[0]} |")
    for mode, pl in d.get("produce_latency", {}).items():
        lines.append(
            f"| `StreamProducer.send`, {mode} replica ({pl['records']} sends, each awaited) | p50 {pl['p50_ms']} ms,"
            f" p99 {pl['p99_ms']} ms, max {pl['max_ms']} ms; {pl['acknowledged_synchronously']} acknowledged"
            " synchronously |"
        )
    return lines


def wan(res: Results) -> list[str]:
    d = doc(res, "wan")
    lines = [
        f"{d['records']:,} records of {d['size']} B a run; rounds shown `1 / 2`."
        + (
            f" Values: {d['data']['generator']} (seed {d['data']['seed']}, lz4 {d['data']['lz4_ratio']}:1, written with"
            f" {d['data']['producer_compression']}); every relay timed from its start of work to the destination"
            " holding the last record."
            if d.get("data")
            else ""
        ),
        "",
        "| round trip | partitions | idempotent C relay | gateway | gateway after its first record | gateway / C relay"
        " | resume to first record |",
        "|---|---|---|---|---|---|---|",
    ]
    points: dict[tuple[float, int], list[dict]] = {}
    for r in d.get("sweep", []):
        points.setdefault((r["rtt_ms"], r["partitions"]), []).append(r)

    def ratio_of(r: dict) -> str:
        return f"{r['ratio']:.2f}" if "ratio" in r else "-"

    def each(rows: list[dict], f: Callable[[dict], str]) -> str:
        return " / ".join(f(r) for r in rows)

    for (rtt, parts), rows in sorted(points.items()):
        lines.append(
            f"| {rtt:g} ms | {parts} | {each(rows, lambda r: k(rate(r['c_relay'])))} |"
            f" {each(rows, lambda r: k(rate(r['gateway'])))} |"
            f" {each(rows, lambda r: k(r['gateway'].get('steady_records_s') or 0))} |"
            f" {each(rows, ratio_of)} |"
            f" {each(rows, lambda r: str(r['gateway'].get('first_record_s', '-')))} s |"
        )
    return lines


def resume_table(res: Results) -> list[str]:
    lines = ["| broker | runs (s) | median | max | target | poll period |", "|---|---|---:|---:|---:|---:|"]
    for name in ("resume-tansu", "resume-noida"):
        d = doc(res, name)
        runs = ", ".join(f"{x:.3f}" for x in d["runs_s"])
        lines.append(
            f"| {d['broker']} | {runs} | {d['median_s']:.3f} s | {d['max_s']:.3f} s | {d['target_s']} s |"
            f" {d['change_poll_s']} s |"
        )
    return lines


def handoff(res: Results) -> list[str]:
    d = doc(res, "handoff")
    lines = [
        "| broker | stop | next record on the partition (s) | stall reported (s) | restarted: next record (s) |"
        " session (s) | broker's join (s) | records | lost | doubled | misplaced |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in d["runs"]:
        moved = r["seconds_to_next_record"]
        lines.append(
            f"| {r['broker']} | {r['signal']} | {moved if moved is not None else 'not moved'} |"
            f" {r['seconds_to_stall_reported'] if r['seconds_to_stall_reported'] is not None else '-'} |"
            f" {r['seconds_from_restart_to_next_record'] or '-'} | {r['session_s']} | {r['broker_join_s']} |"
            f" {r['records']:,} | {r['lost']} | {r['doubled']} | {r['misplaced']} |"
        )
    return lines


def scale(res: Results) -> list[str]:
    d = doc(res, "scale")
    lines = [
        f"Broker: {d['broker']}.",
        "",
        "| size (streams x topics x partitions / gateways) | partitions | set-up s | acquired s |"
        " idle CPU % gateway / source / destination | RSS MB gateway / source / destination | wake ms p50 / max |"
        " new topic s |",
        "|---|---:|---:|---:|---|---|---|---:|",
    ]
    for r in d["sizes"]:
        c, m, w = r["idle_cpu_pct"], r["rss_MB"], r.get("wake_ms") or []
        wake = f"{statistics.median(w):.0f} / {max(w):.0f}" if w else "-"
        lines.append(
            f"| {r['size']} | {r['partitions']:,} | {r['setup_s']:.1f} | {r['acquired_s']:.1f} |"
            f" {c['gateways']:.1f} / {c['source']:.1f} / {c['destination']:.1f} |"
            f" {m['gateways']:.0f} / {m['source']:.0f} / {m['destination']:.0f} | {wake} | {r['new_topic_s']:.2f} |"
        )
    return lines


def copystream_cli(res: Results) -> list[str]:
    d = doc(res, "run")
    lines = ["| what | figure |", "|---|---|"]
    cs = d.get("copystream")
    if cs and "error" not in cs:
        lines.append(
            f"| copystream, {cs['records']:,} records of {cs['size']} B, {cs['partitions']} partitions,"
            f" {cs['master']} | {cs['copystream_rps']:,} records/s ({cs['copystream_seconds']} s), a plain producer"
            f" {cs['plain_producer_rps_before']:,} before and {cs['plain_producer_rps_after']:,} after:"
            f" {cs['ratio']:.2f}x; Spark start-up {cs['spark_startup_seconds']} s |"
        )
    if "cli" in d:
        lines.append(
            f"| the command line, median of 5 | `streamrepl --help` {d['cli']['help_s']} s,"
            f" `stream info` {d['cli']['stream_info_s']} s |"
        )
    return lines


@dataclass(frozen=True)
class Block:
    name: str
    make: Callable[[Results], list[str]]


BLOCKS = [
    Block("standing", standing),
    Block("throughput", throughput),
    Block("latency", latency_failover),
    Block("wan", wan),
    Block("resume", resume_table),
    Block("handoff", handoff),
    Block("scale", scale),
    Block("copystream", copystream_cli),
]


def load(results: Path = RESULTS) -> Results:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(results.glob("*.json"))}


def block_text(block: Block, res: Results) -> str:
    try:
        body = block.make(res)
    except NoFigure as e:
        body = [f"No figures: {e}."]
    return "\n".join(body)


MARK = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(<!-- end table: \2 -->)", re.S)


def render(page: str, res: Results) -> str:
    """The page with every block rewritten; a block the page lacks, or a marker without its block, is an error."""
    made = {b.name: block_text(b, res) for b in BLOCKS}
    found = [m.group(2) for m in MARK.finditer(page)]
    missing = sorted(set(made) - set(found))
    unknown = sorted(set(found) - set(made))
    if missing or unknown:
        raise SystemExit(
            f"{PAGE.name}: blocks missing {missing}, unknown {unknown}: each block sits between"
            " `<!-- table: NAME -->` and `<!-- end table: NAME -->`"
        )
    return MARK.sub(lambda m: f"{m.group(1)}{made[m.group(2)]}\n{m.group(4)}", page)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say whether BENCHMARKS.md is up to date")
    a = ap.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    new = render(page, load())
    if a.check:
        if new != page:
            print(
                f"{PAGE.name} is not what bench/table.py makes of bench/results/: run bench/table.py", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
