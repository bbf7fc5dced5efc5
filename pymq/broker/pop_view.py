"""PopView: the pop state of a store, read from the store alone, for another process.

A :class:`pymq.Broker` keeps its pop state (what each consumer group received and has not
acked) in memory, and writes every change to the revive log
(:mod:`pymq.broker.revive_log`). ``pymq stats`` and ``pymq top`` run in another process
than the broker of a ``pymq serve`` store, on the store opened read-only; they rebuild the
same state as a restart does, from ``config/popState.json`` and the revive log after it,
then follow the log: each :meth:`PopView.rows` applies only the records written since the
last. Nothing is written and no broker is built.
"""

from __future__ import annotations

from typing import Optional

from .broker_config import BrokerConfig
from .broker_stats import pop_rows, queue_counts
from .pop_state import PopState
from .revive_log import (REVIVE_TOPIC_PREFIX, PopStateSnapshot, ReviveLog, clamp_pop_state, rebuild_pop_state,
                         revive_topic)


class PopView:
    """Pop in-flight counts of ``store`` (a read-only :class:`pymq.MessageStore` will do),
    as :meth:`pymq.Broker.stats` gives them under ``"pop"``."""

    def __init__(self, store, cluster_name: Optional[str] = None) -> None:
        self.store = store
        self.cluster_name = cluster_name
        self._log: Optional[ReviveLog] = None
        self._state: Optional[PopState] = None
        #: what loading ``config/popState.json`` had to give up (the whole log is then replayed)
        self.load_problem: Optional[str] = None

    def _revive_topic(self) -> Optional[str]:
        """The revive topic: the cluster's, or the store's only one (the default
        cluster's when it has several)."""
        topics = sorted(t for t in self.store.get_topics() if t.startswith(REVIVE_TOPIC_PREFIX))
        if self.cluster_name is not None:
            want = revive_topic(self.cluster_name)
            return want if want in topics else None
        if len(topics) > 1 and revive_topic(BrokerConfig.cluster_name) in topics:
            return revive_topic(BrokerConfig.cluster_name)
        return topics[0] if topics else None

    def rows(self) -> list:
        """``[{"group", "topic", "inflight", "waiting", "unread"}]`` as of the store's
        end now; empty when no group ever received a message by pop."""
        if self._log is None:
            topic = self._revive_topic()
            if topic is None:
                return []
            snapshot = PopStateSnapshot(self.store.store_path)
            snapshot.strict = False
            snapshot.read_only = True
            snapshot.load()
            self.load_problem = snapshot.load_problem
            self._log = ReviveLog(self.store, topic)
            self._state = rebuild_pop_state(snapshot, self._log, self.store)
        else:
            self._log.replay(self._state, self._log.next_offset)
            clamp_pop_state(self._state, self.store)
        return pop_rows(queue_counts(self._state), self.store)
