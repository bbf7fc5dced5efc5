from typing import Any, Optional

from pymq._core.appender import CommitLogAppender, PutMessageResult

def put_bodies(app: CommitLogAppender, topic: str, bodies: Any, queue_id: Optional[int] = ...,
               keys: Any = ..., tags: Any = ..., properties: Any = ...) -> PutMessageResult: ...
