"""``xmc retry-policy`` and the retries part of ``xmc wu get``: automatic retries
(docs/retries.md), through the ESS's RetryService."""

from __future__ import annotations

import click

from xmc_api.xmc.v1 import retry_pb2, retry_pb2_grpc

from .client import Client, experiment_name, fmt_time, pass_client, print_table, to_dict


def _stub(client: Client) -> retry_pb2_grpc.RetryServiceStub:
    return retry_pb2_grpc.RetryServiceStub(client.channel())


def _show_policy(client: Client, found: retry_pb2.ExperimentRetryPolicy) -> None:
    client.show(
        to_dict(found),
        lambda: click.echo(found.policy or "no default retry policy"),
    )


@click.group("retry-policy")
def retry_policy() -> None:
    """An experiment's default retry policy for its units (a unit's own
    xmc.dev/retry-policy annotation wins over it)."""


@retry_policy.command("get")
@click.argument("experiment")
@pass_client
def policy_get(client: Client, experiment: str) -> None:
    """Show EXPERIMENT's default policy (``7`` or ``experiments/7``)."""
    request = retry_pb2.GetExperimentRetryPolicyRequest(name=experiment_name(experiment))
    _show_policy(client, client.call(_stub(client).GetExperimentRetryPolicy, request))


@retry_policy.command("set")
@click.argument("experiment")
@click.argument("policy")
@pass_client
def policy_set(client: Client, experiment: str, policy: str) -> None:
    """Set EXPERIMENT's default policy to POLICY, JSON, e.g.
    '{"max_attempts": 3, "on_exit_codes": [1, 137], "backoff_seconds": 30}'."""
    request = retry_pb2.SetExperimentRetryPolicyRequest(
        name=experiment_name(experiment), policy=policy
    )
    _show_policy(client, client.call(_stub(client).SetExperimentRetryPolicy, request))


@retry_policy.command("clear")
@click.argument("experiment")
@pass_client
def policy_clear(client: Client, experiment: str) -> None:
    """Remove EXPERIMENT's default policy."""
    request = retry_pb2.SetExperimentRetryPolicyRequest(name=experiment_name(experiment))
    _show_policy(client, client.call(_stub(client).SetExperimentRetryPolicy, request))


def fetch_retries(client: Client, work_unit: str) -> retry_pb2.WorkUnitRetries:
    found: retry_pb2.WorkUnitRetries = client.call(
        _stub(client).GetWorkUnitRetries, retry_pb2.GetWorkUnitRetriesRequest(name=work_unit)
    )
    return found


def attempt_line(retries: retry_pb2.WorkUnitRetries) -> str:
    """ "attempt 2 of 3 (policy of the work unit)", or that there is no policy."""
    if not retries.max_attempts:
        return "retries: no retry policy"
    source = "the work unit" if retries.policy_source == "work_unit" else "its experiment"
    return f"retries: attempt {retries.attempt} of {retries.max_attempts} (policy of {source})"


def print_retries(retries: retry_pb2.WorkUnitRetries) -> None:
    click.echo(attempt_line(retries))
    if not retries.decisions:
        return
    rows = [
        [
            str(d.execution_id),
            str(d.exit_code) if d.HasField("exit_code") else "—",
            d.verdict + (f" → {d.retry_execution_id}" if d.retry_execution_id else ""),
            d.reason,
            fmt_time(d.start_time) if d.HasField("start_time") else "",
        ]
        for d in retries.decisions
    ]
    print_table(None, ["execution", "exit code", "verdict", "why", "retry starts"], rows)
