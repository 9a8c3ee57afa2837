"""What the what-if says an operator should do: the baseline, the trade-off frontier and
a conclusion in words, all computed from the summary rows (whatif.SUMMARY_SCHEMA).

- The baseline is the configuration the trace ran with (whatif.WhatIfConfig.is_baseline:
  session timeout, static membership, rebalance timeout and heartbeat interval all "as
  recorded"); every other configuration is shown as a change against it.
- The frontier: the configurations no other one beats on every one of the OBJECTIVES
  (false expirations, undetected crashes, mean crash-detection latency, total time
  rebalancing; lower is better on each) while being strictly better on one (Pareto).
- The pick: the frontier configuration with the lowest sum of its objectives, each
  scaled to its range over the grid (so a count and a duration weigh the same); the
  baseline wins a tie. The conclusion says what changing to it gains and costs, and what
  the other frontier configurations trade.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

Row = Dict[str, object]


@dataclass(frozen=True)
class Objective:
    key: str
    name: str
    value: Callable[[Row], float]      # lower is better; inf: cannot be measured as better
    unit: str                          # "" (a count) or "s"


def _detect_mean_s(r: Row) -> float:
    """Mean crash-detection latency (s); no crash at all: 0 (nothing to detect late);
    crashes but none detected: inf (never detected is the worst latency)."""
    if r["crashes"] == 0:
        return 0.0
    if r["crash_detect_mean_ms"] < 0:
        return math.inf
    return float(r["crash_detect_mean_ms"]) / 1000.0


OBJECTIVES = (
    Objective("false_expirations", "false expirations", lambda r: float(r["false_expirations"]), ""),
    Objective("crashes_undetected", "undetected crashes",
              lambda r: float(r["crashes_undetected"]), ""),
    Objective("crash_detect_mean", "mean crash detection", _detect_mean_s, "s"),
    Objective("rebalancing", "total time rebalancing",
              lambda r: float(r["rebalancing_ms"]) / 1000.0, "s"),
)


def is_baseline(r: Row) -> bool:
    return (r["session_timeout_ms"] == -1 and r["static"] == "trace"
            and r["rebalance_timeout_ms"] == -1 and r["heartbeat_interval_ms"] == -1)


def baseline_index(rows: Sequence[Row]) -> Optional[int]:
    for i, r in enumerate(rows):
        if is_baseline(r):
            return i
    return None


def _vector(r: Row) -> List[float]:
    return [o.value(r) for o in OBJECTIVES]


def _better_counts(a: Row, b: Row) -> int:
    """On how many objectives a is strictly better than b (a tie, such as no crash left
    undetected by either, is not one)."""
    return sum(x < y for x, y in zip(_vector(a), _vector(b)))


def _on_counts(k: int) -> str:
    """'on every count', or on how many of them (the rest matched)."""
    n = len(OBJECTIVES)
    if k == n:
        return "on every count"
    return f"on {k} of the {n} counts, and matched on the other{'s' if n - k > 1 else ''},"


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b on every objective and better on one."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def frontier(rows: Sequence[Row]) -> List[int]:
    """Indices of the rows no other row dominates, in grid order (equal rows all stay)."""
    vs = [_vector(r) for r in rows]
    return [i for i, v in enumerate(vs) if not any(dominates(w, v) for w in vs)]


def _scores(rows: Sequence[Row]) -> List[float]:
    """Per row, the sum of its objectives each scaled to [0, 1] over the grid (an inf is
    worse than any finite value: 1 + 1 on its objective)."""
    vs = [_vector(r) for r in rows]
    out = [0.0] * len(rows)
    for k in range(len(OBJECTIVES)):
        finite = [v[k] for v in vs if math.isfinite(v[k])]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
        for i, v in enumerate(vs):
            if not math.isfinite(v[k]):
                out[i] += 2.0
            elif hi > lo:
                out[i] += (v[k] - lo) / (hi - lo)
    return out


def pick(rows: Sequence[Row], front: Sequence[int], base: Optional[int]) -> int:
    scores = _scores(rows)
    # the lowest score; a tie goes to the baseline (no change), then to grid order
    return min(front, key=lambda i: (round(scores[i], 9), i != base, i))


# -- words -------------------------------------------------------------------------------------

def _s(seconds: float) -> str:
    return f"{seconds:,.1f} s"


def _ms(ms: int) -> str:
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms / 1000:g} s"


def trace_sessions(groups: Sequence[Row]) -> Dict[int, int]:
    """The baseline's groups by the session timeout they ran with: {ms: groups}."""
    out: Dict[int, int] = {}
    for g in groups:
        out[g["session_timeout_ms"]] = out.get(g["session_timeout_ms"], 0) + 1
    return dict(sorted(out.items()))


def describe_baseline(groups: Sequence[Row]) -> str:
    """The baseline's settings in words, from its groups-table rows."""
    sessions = trace_sessions(groups)
    if not sessions:
        return "the settings the trace ran with"
    if len(sessions) == 1:
        sess = f"session.timeout.ms {_ms(next(iter(sessions)))} (as recorded)"
    else:
        sess = ("session.timeout.ms as each consumer's joins carried (" + ", ".join(
            f"{_ms(ms)} in {n} group{'s' if n > 1 else ''}" for ms, n in sessions.items()) + ")")
    mixed = [g for g in groups if g["static_incarnations"] > 0]
    stat = (f"static membership in {len(mixed)} of {len(groups)} groups" if mixed
            else "no static membership")
    # a group counts with one static member among many: say how many there are
    static = sum(g["static_incarnations"] for g in mixed)
    everyone = sum(g.get("incarnations", g["static_incarnations"]) for g in mixed)
    if static < everyone:
        stat += f" for {static:,} of their {everyone:,} consumers counting restarts"
    return f"{sess}, {stat}"


def _recorded_session(groups: Sequence[Row]) -> str:
    sessions = trace_sessions(groups)
    if len(sessions) == 1:
        return _ms(next(iter(sessions)))
    if sessions:
        return f"the recorded {_ms(min(sessions))}-{_ms(max(sessions))}"
    return "the recorded value"


def describe_change(r: Row, base_groups: Sequence[Row]) -> str:
    """What an operator would set to go from the baseline to row r."""
    parts = []
    if r["session_timeout_ms"] != -1:
        parts.append(f"session.timeout.ms from {_recorded_session(base_groups)} to "
                     f"{_ms(r['session_timeout_ms'])}")
    if r["static"] == "on":
        parts.append("group.instance.id on every consumer (static membership)")
    elif r["static"] == "off":
        parts.append("no group.instance.id (dynamic membership)")
    if r["rebalance_timeout_ms"] != -1:
        parts.append(f"max.poll.interval.ms {_ms(r['rebalance_timeout_ms'])}")
    if r["heartbeat_interval_ms"] != -1:
        parts.append(f"heartbeat.interval.ms {_ms(r['heartbeat_interval_ms'])}")
    return " and ".join(parts) if parts else "nothing"


def effects(r: Row, b: Row) -> Dict[str, List[str]]:
    """What going from baseline row b to row r does, in words: gains (what it does, a
    verb first) and costs (what it costs, a noun first)."""
    gains: List[str] = []
    costs: List[str] = []
    fe, fb = r["false_expirations"], b["false_expirations"]
    if fe < fb:
        gains.append(f"removes {fb - fe} of {fb} false expirations")
    elif fe > fb:
        costs.append(f"{fe - fb} more false expiration{'s' if fe - fb > 1 else ''} ({fb} → {fe})")
    ue, ub = r["crashes_undetected"], b["crashes_undetected"]
    if ue < ub:
        gains.append(f"detects {ub - ue} more crash{'es' if ub - ue > 1 else ''}")
    elif ue > ub:
        costs.append(f"{ue - ub} crash{'es' if ue - ub > 1 else ''} left undetected")
    dr, db = _detect_mean_s(r), _detect_mean_s(b)
    if math.isfinite(dr) and math.isfinite(db) and abs(dr - db) >= 0.05:
        if dr < db:
            gains.append(f"cuts mean crash detection by {_s(db - dr)} ({_s(db)} → {_s(dr)})")
        else:
            costs.append(f"+{_s(dr - db)} mean crash detection ({_s(db)} → {_s(dr)})")
    tr, tb = r["rebalancing_ms"] / 1000.0, b["rebalancing_ms"] / 1000.0
    if abs(tr - tb) >= 0.05:
        if tr < tb:
            gains.append(f"cuts total time rebalancing by {_s(tb - tr)} ({_s(tb)} → {_s(tr)})")
        else:
            costs.append(f"+{_s(tr - tb)} total time rebalancing ({_s(tb)} → {_s(tr)})")
    nr, nb = r["rebalances"], b["rebalances"]
    if nr != nb:    # (not an objective: its time is; said for what an operator sees)
        if nr < nb:
            gains.append(f"saves {nb - nr} rebalances ({nb} → {nr})")
        else:
            costs.append(f"{nr - nb} more rebalances ({nb} → {nr})")
    return {"gains": gains, "costs": costs}


def _join(items: List[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


@dataclass
class Advice:
    baseline: Optional[int]
    frontier: List[int]
    pick: int
    headline: str          # what to change (or keep), one sentence
    cost: str              # what it costs, one sentence
    alternatives: str      # what the other frontier configurations trade
    others: List[str]      # the same, one "label: trade" per configuration
    beaten: str            # which configurations beat the baseline on every count ("": none)
    conclusion: str        # the paragraph: headline, cost, alternatives


def advise(rows: Sequence[Row], base_groups: Sequence[Row] = (),
           span: str = "the trace") -> Optional[Advice]:
    """The advice for a what-if's summary rows (None for no rows). `base_groups`: the
    baseline's groups-table rows (its recorded session timeouts); `span`: the duration
    the totals are over, in words."""
    if not rows:
        return None
    base = baseline_index(rows)
    front = frontier(rows)
    best = pick(rows, front, base)
    label = rows[best]["label"]
    if base is None:
        headline = (f"Of the configurations tried, {label} balances the trade-offs best; "
                    "the grid has no baseline (session=trace static=trace) to measure a "
                    "change against.")
        cost = ""
    elif best == base:
        names = _join([o.name for o in OBJECTIVES])
        headline = ("Keep the settings the trace ran with: "
                    + (f"no configuration tried does better on any of {names}." if front == [base]
                       else f"no configuration tried gives a better balance of {names}."))
        cost = ("Keeping them costs nothing" + (
            "." if front == [base] else
            "; each other configuration on the frontier gains on one count and loses on "
            "another (below)."))
    else:
        e = effects(rows[best], rows[base])
        headline = (f"Set {describe_change(rows[best], base_groups)} ({label}): in {span} it "
                    f"{_join(e['gains']) or 'changes nothing measured'}.")
        k, n = _better_counts(rows[best], rows[base]), len(OBJECTIVES)
        cost = (f"It costs {_join(e['costs'])}." if e["costs"]
                else "It costs nothing on these measures: it beats the settings the trace "
                     "ran with on every count." if k == n
                else f"It costs nothing on these measures: it is better than the settings "
                     f"the trace ran with on {k} of the {n} and no worse on the "
                     f"other{'s' if n - k > 1 else ''}.")
    others = []
    for i in front:
        if i == best or i == base:
            continue
        if base is None:
            others.append(rows[i]["label"])
            continue
        e = effects(rows[i], rows[base])
        trade = "; ".join(x for x in (_join(e["gains"]),
                                      e["costs"] and "costs " + _join(e["costs"])) if x)
        others.append(f"{rows[i]['label']}: {trade or 'the same as the baseline'}")
    beaten = ""
    if base is not None and base not in front:
        by_count: Dict[int, List[str]] = {}
        for i in front:
            if dominates(_vector(rows[i]), _vector(rows[base])):
                by_count.setdefault(_better_counts(rows[i], rows[base]), []).append(
                    rows[i]["label"])
        if by_count:
            beaten = ("The settings the trace ran with are beaten "
                      + "; ".join(f"{_on_counts(k)} by {_join(labels)}"
                                  for k, labels in sorted(by_count.items(), reverse=True))
                      + ".")
    alternatives = " ".join(x for x in (("Also on the frontier: " + "; ".join(others) + ".")
                                        if others else "No other configuration is on the "
                                        "frontier.", beaten) if x)
    conclusion = " ".join(x for x in (headline, cost, alternatives) if x)
    return Advice(base, front, best, headline, cost, alternatives, others, beaten, conclusion)
