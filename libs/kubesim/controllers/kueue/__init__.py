"""A simulated Kueue (``kueue.x-k8s.io``): one Workload per queued JobSet, quota-based
admission in priority-then-FIFO order, preemption within a ClusterQueue, and the
visibility API's pending-workload positions.

Two kinds of pass, both level-triggered:
- per JobSet (Kueue's job framework): create its Workload (none while its
  WorkloadPriorityClass is missing), mark it ``Finished`` when the JobSet finished or is
  being deleted (``OwnerNotFound``, which releases its quota; the Workload itself goes
  with the JobSet, by garbage collection), follow its priority-class label, and make
  the JobSet's ``spec.suspend`` agree with the Workload (admitted → run, not admitted or
  evicted → suspended);
- one scheduling pass over everything: ``admit(queue_state, workloads)`` is a pure
  function that returns what to admit, evict and leave pending (with Kueue's reasons
  and messages); the shell writes Workload statuses and the queues' status counters.

Eviction is two-phase, as upstream: the scheduler only marks the victim ``Evicted`` and
``Preempted``; the JobSet pass suspends the JobSet (the JobSet controller deletes its
pods) and, once the JobSet reports no active pods, releases the quota
(``QuotaReserved=False``, ``Requeued=True``). Until then the victim keeps its quota and
the preemptor waits (``WaitingForPreemptedWorkloads``).

``KueueVersion`` picks the waiting reasons: v0.19's defaults (``Pending``,
``Inadmissible``) or current upstream's with ``UnadmittedWorkloadsObservability``
(``WaitingForQuota``, ``ExceedsMaxQuota``, ...). docs/kubesim.md names the upstream
files followed.

Simplified: no cohorts or borrowing, no admission checks, no topology; flavors are tried
in order per resource group; ``namespaceSelector`` is ignored. A ClusterQueue annotated
``kubesim.xmc/multikueue-cluster: <name>`` stamps that name into ``status.clusterName``
of the Workloads it admits, standing in for MultiKueue.

Modules, pure unless marked: ``vocabulary`` (labels, versions, waiting reasons), ``model``
(the scheduling model), ``flavors``, ``preemption`` and ``admission`` (one scheduling
cycle), ``parse`` (API objects into the model; its ``queue_state`` reads the store),
``status`` (status writers), ``workload`` (a JobSet's Workload), ``visibility`` (pending
positions, read from the store), ``webhooks`` (Kueue's JobSet webhooks) and
``controller`` (the shell).
"""
