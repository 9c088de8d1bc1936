"""The wire vocabulary shared by every side: broker, name server, client, proxy and Spark.

Pure values and codecs, no I/O beyond :func:`rocketq.protocol.fastjson.persist`; nothing here
imports the broker, the name server, the store or the client, so each of them can use it without
loading the others. Modules (import them directly; this package imports none of them)::

    fastjson.py   fastjson's JSON dialect: pretty files, compact and sorted bodies, object map keys,
                  tolerant and strict value readers, atomic file replacement
    headers.py    request headers: SEND_MESSAGE (V1 names, V2 letters), PULL_MESSAGE, PullSysFlag
    heartbeat.py  HEART_BEAT bodies, SubscriptionData and the sub-expression parser
    queue.py      MessageQueue and offset tables keyed by it
    topic.py      TopicConfig, permissions (PermName), reserved topic names, %RETRY% / %DLQ% names
    route.py      route and registration bodies: TopicRouteData, BrokerData, QueueData, ClusterInfo,
                  TopicList, KVTable, DataVersion, RegisterBrokerBody; MASTER_ID
    batch.py      the SEND_BATCH_MESSAGE body
    record.py     CommitLog records (the store's files and the bytes of a pull answer): layout,
                  encode, decode, view_to_message

Request and response codes stay with the frame codec: :class:`rocketq.remoting.codes.RequestCode`
(and the command layer of :mod:`rocketq.remoting`), and :class:`rocketq.errors.ResponseCode`, next
to the error classes that carry those codes.
"""
