"""``xmc queue [NAME]`` (docs/queues.md): Kueue's queues as the ESS reads them from the
cluster — every ClusterQueue's quota and usage, or one queue's admitted and pending work
units in Kueue's order — and an admin's ``xmc wu set-priority``."""

from __future__ import annotations

import click

from xmc_api.xmc.v1 import queue_pb2, queue_pb2_grpc

from .client import Client, fmt_time, pass_client, print_table, to_dict, work_unit_name


def _stub(client: Client) -> queue_pb2_grpc.QueueServiceStub:
    return queue_pb2_grpc.QueueServiceStub(client.channel())


def _quota_rows(queue: queue_pb2.Queue) -> list[list[str]]:
    return [
        [queue.cluster_queue, q.flavor, q.resource, q.nominal_quota, q.borrowing_limit or "-",
         q.reserved, q.used, q.borrowed]
        for q in queue.quotas
    ]  # fmt: skip


_QUOTA_HEADERS = ["queue", "flavor", "resource", "nominal", "borrow limit", "reserved", "used",
                  "borrowed"]  # fmt: skip


def _unit(workload: queue_pb2.QueuedWorkload) -> str:
    return workload.work_unit or workload.owner or workload.workload


def _print_queue(queue: queue_pb2.Queue) -> None:
    cohort = f", cohort {queue.cohort}" if queue.cohort else ""
    click.echo(
        f"{queue.cluster_queue}{cohort}: {queue.admitted_workloads} admitted, "
        f"{queue.pending_workloads} pending (LocalQueues: {', '.join(queue.local_queues)})"
    )
    print_table(None, _QUOTA_HEADERS, _quota_rows(queue))
    if queue.positions_unavailable:
        click.echo(f"no positions: {queue.positions_unavailable}")
    pending = [
        [str(w.position or "?"), _unit(w), str(w.priority), w.priority_class,
         f"{w.wait.ToTimedelta().total_seconds():.0f}s", w.message]
        for w in queue.pending
    ]  # fmt: skip
    click.echo("pending:")
    print_table(None, ["#", "work unit", "priority", "class", "waiting", "why"], pending)
    admitted = [
        [_unit(w), str(w.priority), w.priority_class, fmt_time(w.admitted_time),
         ", ".join(w.flavors)]
        for w in queue.admitted
    ]  # fmt: skip
    click.echo("admitted:")
    print_table(None, ["work unit", "priority", "class", "admitted", "flavors"], admitted)


@click.command("queue")
@click.argument("name", required=False)
@pass_client
def queue(client: Client, name: str | None) -> None:
    """Every ClusterQueue's quota and usage; with NAME (a ClusterQueue or a LocalQueue)
    its admitted and pending work units, in Kueue's order."""
    if name:
        found = client.call(_stub(client).GetQueue, queue_pb2.GetQueueRequest(name=name))
        client.show(to_dict(found), lambda: _print_queue(found))
        return
    listed = client.call(_stub(client).ListQueues, queue_pb2.ListQueuesRequest())
    client.show(
        to_dict(listed),
        lambda: print_table(
            None, _QUOTA_HEADERS, [r for q in listed.queues for r in _quota_rows(q)]
        ),
    )


@click.command("set-priority")
@click.argument("work_unit")
@click.argument("priority_class")
@pass_client
def set_priority(client: Client, work_unit: str, priority_class: str) -> None:
    """Admins: give WORK_UNIT (``7/3`` or experiments/7/workUnits/3) the
    WorkloadPriorityClass PRIORITY_CLASS (xmc-priority-{low|normal|high}-{low|normal|high});
    Kueue re-orders its queue once the Actuator has relabelled the JobSet."""
    request = queue_pb2.SetWorkUnitPriorityRequest(
        name=work_unit_name(work_unit), priority_class=priority_class
    )
    found = client.call(_stub(client).SetWorkUnitPriority, request)
    client.show(
        to_dict(found),
        lambda: click.echo(
            f"{found.name}: {found.priority_class} requested (task {found.task_id})"
        ),
    )
