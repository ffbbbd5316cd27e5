"""The Kubernetes API over HTTP (aiohttp), with the semantics kubernetes-asyncio relies on.

Routing turns a path into a ``Target`` (resource, version, namespace, name, subresource) and
dispatches on its shape and the HTTP method; every handler reads the request body *before*
touching the store and then reads and writes the store without an ``await`` in between, so
a patch or a conditional delete is atomic like it is on the real server. Errors are
``ApiError``s turned into ``Status`` bodies in one middleware.

Traps of a real server reproduced on purpose (docs/kubesim.md lists them):
- custom resources take merge and JSON patches only (strategic merge patch is 415);
- a custom resource PUT without ``metadata.resourceVersion`` is 422 (no unconditional
  update), and a custom resource body without ``apiVersion``/``kind`` is 400;
- create answers 201 (kubernetes-asyncio returns None for custom objects otherwise).

Modules: ``app`` (every route, and the error middleware), ``context`` (the ``ApiContext``
handlers share, JSON answers), ``discovery``, ``verbs`` (the resource verbs), ``decode``
(paths, bodies, options and continue tokens — pure), ``visibility`` (Kueue's pending
workloads) and ``control`` (``/kubesim/*``).
"""
