"""The broker's request tables: request code → processor method.

Two tables (see :mod:`rocketq.broker.server`): every request code the broker serves and the
coroutine that answers it, and the few codes (sends, pulls) whose answer can often be given right
where the transport decodes the frame, without a task. The processors are built here, one per
family of requests, all on the same :class:`~rocketq.broker.context.BrokerContext`.
"""

from __future__ import annotations

from rocketq.broker.admin import AdminBrokerProcessor
from rocketq.broker.admin_groups import AdminGroupProcessor
from rocketq.broker.admin_stats import AdminStatsProcessor
from rocketq.broker.client_config import ClientConfigProcessor
from rocketq.broker.consumer_manage import ConsumerManageProcessor
from rocketq.broker.context import BrokerContext
from rocketq.broker.pop_processor import PopMessageProcessor
from rocketq.broker.pull import PullMessageProcessor
from rocketq.broker.query import QueryMessageProcessor
from rocketq.broker.reset_offset import ResetOffsetProcessor
from rocketq.broker.send import SendMessageProcessor
from rocketq.broker.transaction import TransactionService
from rocketq.remoting import RequestCode
from rocketq.remoting.connection import DeferringHandler, RequestHandler


def request_tables(
    ctx: BrokerContext,
) -> tuple[dict[int, RequestHandler], dict[int, DeferringHandler], TransactionService, SendMessageProcessor]:
    """The request table, the immediate table, the transaction service they use and the send
    processor (whose lone handler the broker opens to its connections)."""
    send = SendMessageProcessor(ctx)
    pull = PullMessageProcessor(ctx)
    query = QueryMessageProcessor(ctx)
    consumer = ConsumerManageProcessor(ctx)
    admin = AdminBrokerProcessor(ctx)
    stats = AdminStatsProcessor(ctx)
    groups = AdminGroupProcessor(ctx)
    broker2client = ResetOffsetProcessor(ctx)
    transactions = TransactionService(ctx)
    pop = PopMessageProcessor(ctx)
    client_config = ClientConfigProcessor(ctx)
    rc = RequestCode
    handlers: dict[int, RequestHandler] = {
        rc.SEND_MESSAGE: send.send_message,
        rc.SEND_MESSAGE_V2: send.send_message,
        rc.SEND_BATCH_MESSAGE: send.send_message,
        rc.CONSUMER_SEND_MSG_BACK: send.consumer_send_msg_back,
        rc.END_TRANSACTION: transactions.end_transaction,
        rc.PULL_MESSAGE: pull.process,
        rc.LITE_PULL_MESSAGE: pull.process,
        rc.POP_MESSAGE: pop.pop_message,
        rc.ACK_MESSAGE: pop.ack_message,
        rc.CHANGE_MESSAGE_INVISIBLETIME: pop.change_invisible_time,
        rc.QUERY_MESSAGE: query.query_message,
        rc.VIEW_MESSAGE_BY_ID: query.view_message_by_id,
        rc.HEART_BEAT: consumer.heartbeat,
        rc.UNREGISTER_CLIENT: consumer.unregister_client,
        rc.CHECK_CLIENT_CONFIG: client_config.check_client_config,
        rc.GET_CONSUMER_LIST_BY_GROUP: consumer.get_consumer_list_by_group,
        rc.GET_CONSUMER_CONNECTION_LIST: consumer.get_consumer_connection_list,
        rc.GET_PRODUCER_CONNECTION_LIST: consumer.get_producer_connection_list,
        rc.QUERY_CONSUMER_OFFSET: consumer.query_consumer_offset,
        rc.UPDATE_CONSUMER_OFFSET: consumer.update_consumer_offset,
        rc.LOCK_BATCH_MQ: consumer.lock_batch_mq,
        rc.UNLOCK_BATCH_MQ: consumer.unlock_batch_mq,
        rc.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
        rc.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
        rc.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
        rc.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group,
        rc.GET_BROKER_RUNTIME_INFO: admin.get_broker_runtime_info,
        rc.DELETE_EXPIRED_COMMITLOG: admin.delete_expired_commitlog,
        rc.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset_by_timestamp,
        rc.GET_MAX_OFFSET: admin.get_max_offset,
        rc.GET_MIN_OFFSET: admin.get_min_offset,
        rc.GET_EARLIEST_MSG_STORETIME: admin.get_earliest_msg_storetime,
        rc.GET_TOPIC_STATS_INFO: stats.get_topic_stats_info,
        rc.GET_CONSUME_STATS: stats.get_consume_stats,
        rc.QUERY_TOPIC_CONSUME_BY_WHO: stats.query_topic_consume_by_who,
        rc.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: groups.update_and_create_subscription_group,
        rc.DELETE_SUBSCRIPTIONGROUP: groups.delete_subscription_group,
        rc.DELETE_TOPIC_IN_BROKER: groups.delete_topic_in_broker,
        rc.INVOKE_BROKER_TO_RESET_OFFSET: broker2client.reset_offset,
        rc.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: broker2client.get_consumer_status,
    }
    immediate: dict[int, DeferringHandler] = {
        rc.SEND_MESSAGE: send.send_message_now,
        rc.SEND_MESSAGE_V2: send.send_message_now,
        rc.SEND_BATCH_MESSAGE: send.send_message_now,
        rc.PULL_MESSAGE: pull.process_now,
        rc.LITE_PULL_MESSAGE: pull.process_now,
        rc.UPDATE_CONSUMER_OFFSET: consumer.update_consumer_offset_now,
    }
    return handlers, immediate, transactions, send
