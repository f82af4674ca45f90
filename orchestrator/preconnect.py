"""Connect to a job's node and start its node helper in a thread while the CLI checks the inputs and makes
the job (issue 26: ~0.25 s of network and node-side start-up that the checks used to wait in front of).

The SSH stack is imported by the caller's thread first (an import holds the GIL: two importing threads only
take turns), so the thread mostly waits on the network, and the caller's checks run meanwhile. Nothing of
the job is on the node before ``target()`` returns: a connection and a helper that answered hello (the
discover step sends the first request). A check that fails abandons it: the thread closes the connection
once it is done, and the one-line error is out at once, never behind a connect timeout."""

from __future__ import annotations

import threading

from .context import Target
from .errors import TuneRemoteError
from .inventory import ContainerSpec, NodeSpec


class Preconnect:
    def __init__(self, node: NodeSpec, container: ContainerSpec, accept_new_host_key: bool = False):
        self._error: BaseException | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        try:
            self._target = Target(node, container, accept_new_host_key=accept_new_host_key)
        except TuneRemoteError as exc:      # e.g. its ssh_config: said by target(), after the inputs' checks
            self._error = exc
            return
        self._thread = threading.Thread(target=self._run, name="tune-remote-connect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target.connect()
        except BaseException as exc:        # the caller gets it from target(), as from Target.connect()
            self._error = exc
        else:
            try:
                self._target.helper.start()
            except TuneRemoteError:          # the first request starts it again and says what is wrong
                pass
        with self._lock:
            if self._abandoned:
                self._target.close()

    def target(self) -> Target:
        """The connected target (its helper started where it could be); raises what connecting raised."""
        if self._thread is None:
            raise self._error
        self._thread.join()
        if self._error is not None:
            self._target.close()
            raise self._error
        return self._target

    def abandon(self) -> None:
        """The job is not made: the connection is closed (now, or by the thread once it is done)."""
        with self._lock:
            self._abandoned = True
            if self._thread is not None and not self._thread.is_alive():
                self._target.close()
