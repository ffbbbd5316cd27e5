"""kubesim: an embedded Kubernetes API emulator with JobSet, Kueue and kubelet simulators.

There is no cluster in development or CI; kubesim serves the Kubernetes API over real HTTP
so the Actuator and Reconciler run their real kubernetes-asyncio code against it. See
docs/kubesim.md for what is and is not emulated.
"""
