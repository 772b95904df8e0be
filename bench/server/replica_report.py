"""Counts and checks for one replica scenario (bench/server/replicas.py), from the load
generator's records (bench/server/replica_load.py): (start, end, outcome, upstream addresses,
upstream statuses), one per request."""
import collections
import re


def _ports(upstream):
    """The replicas nginx tried, in order ("127.0.0.1:8000, 127.0.0.1:8010" -> [8000, 8010])."""
    return [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", upstream)]


def _percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summarize(name, records, replica_ports, target, event, started, seconds, concurrency):
    """replica_ports maps each replica's HTTP port to its index; target is the replica taken
    away, event the times of its signal, exit and return (replicas.take_away)."""
    t_signal, t_ready = event["signal"], event["ready"]
    first = [(_ports(r[3]) or [None])[0] for r in records]
    last = [(_ports(r[3]) or [None])[-1] for r in records]
    target_port = next(p for p, i in replica_ports.items() if i == target)

    per_replica = collections.Counter()
    before, after_return = collections.Counter(), collections.Counter()
    for r, port in zip(records, last):
        if r[2] != "ok":
            continue
        i = replica_ports.get(port)
        per_replica[i] += 1
        if r[1] < t_signal:
            before[i] += 1
        if r[0] > t_ready:
            after_return[i] += 1

    # In flight at the signal: sent by a client before it and answered after it. "On the
    # target" when the proxy's first choice for it was the replica taken away.
    in_flight = [k for k, r in enumerate(records) if r[0] <= t_signal < r[1]]
    on_target = {k for k in in_flight if first[k] == target_port}

    retried = collections.Counter()  # (first replica, statuses) -> requests
    retried_from_target_later = 0  # first sent to the target after the signal
    for k, r in enumerate(records):
        if len(_ports(r[3])) > 1:
            retried[f"replica {replica_ports.get(first[k])}: {r[4]}"] += 1
            if first[k] == target_port and k not in on_target:
                retried_from_target_later += 1

    failures = [k for k, r in enumerate(records) if r[2] != "ok"]
    latencies = sorted((r[1] - r[0]) * 1e3 for r in records if r[2] == "ok")
    return {
        "scenario": name,
        "seconds": seconds,
        "concurrency": concurrency,
        "target": target,
        "exit_code": event["exit_code"],
        "signal_at_s": round(t_signal - started, 3),
        "exit_after_s": round(event["exited"] - t_signal, 3),
        "ready_after_s": round(t_ready - t_signal, 3),
        "requests": len(records),
        "ok": len(records) - len(failures),
        "failures": dict(collections.Counter(records[k][2] for k in failures)),
        "failures_outside_target_in_flight": sum(k not in on_target for k in failures),
        "in_flight_at_signal": len(in_flight),
        "in_flight_on_target_at_signal": len(on_target),
        "in_flight_on_target_retried": sum(len(_ports(records[k][3])) > 1 for k in on_target),
        "retried_from_target_after_signal": retried_from_target_later,
        "retried": dict(retried),
        "per_replica": {str(i): per_replica[i] for i in sorted(replica_ports.values())},
        "per_replica_before_signal": {str(i): before[i] for i in sorted(replica_ports.values())},
        "per_replica_after_return": {str(i): after_return[i] for i in sorted(replica_ports.values())},
        "requests_per_s": round(len(records) / seconds, 1),
        "p50_ms": round(_percentile(latencies, 0.50), 3) if latencies else None,
        "p99_ms": round(_percentile(latencies, 0.99), 3) if latencies else None,
    }


def check(report):
    """What must hold; returns the problems found (empty when the scenario passed)."""
    problems = []
    target = str(report["target"])
    if "wrong" in report["failures"]:
        problems.append(f"{report['failures']['wrong']} answers were wrong")
    if report["scenario"] == "drain":
        if report["failures"]:
            problems.append(f"requests failed while a replica drained: {report['failures']}")
        if report["exit_code"] != 0:
            problems.append(f"the drained replica exited {report['exit_code']}, not 0")
    else:
        if report["failures_outside_target_in_flight"]:
            problems.append(f"{report['failures_outside_target_in_flight']} failed requests were "
                            "not in flight on the killed replica")
        if report["exit_code"] != -9:
            problems.append(f"the killed replica exited {report['exit_code']}, not by SIGKILL")
    if report["in_flight_at_signal"] == 0:
        problems.append("no request was in flight at the signal: the scenario tested nothing")
    if report["in_flight_at_signal"] > report["concurrency"]:
        problems.append(f"{report['in_flight_at_signal']} requests in flight at the signal, "
                        f"more than the concurrency {report['concurrency']}")
    idle = [i for i, n in report["per_replica_before_signal"].items() if n == 0]
    if idle:
        problems.append(f"replicas {idle} served nothing before the signal: not balanced")
    if report["per_replica_after_return"][target] == 0:
        problems.append(f"replica {target} served nothing after it came back")
    return problems


def render(report):
    lines = [f"== {report['scenario']}: replica {report['target']}, {report['seconds']} s at "
             f"concurrency {report['concurrency']}"]
    for key in ("signal_at_s", "exit_after_s", "ready_after_s", "exit_code", "requests", "ok",
                "failures", "in_flight_at_signal", "in_flight_on_target_at_signal",
                "in_flight_on_target_retried", "failures_outside_target_in_flight",
                "retried_from_target_after_signal", "retried", "per_replica",
                "per_replica_before_signal", "per_replica_after_return", "requests_per_s",
                "p50_ms", "p99_ms", "load_generator_cpu_s"):
        lines.append(f"  {key}: {report[key]}")
    lines.append("  checks: " + ("passed" if not report["problems"] else
                                 "FAILED: " + "; ".join(report["problems"])))
    return "\n".join(lines)
