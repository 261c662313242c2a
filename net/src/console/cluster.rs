//! `/`: the cluster page. The broker (id, listeners, version), its topics
//! and partitions (log start, LSO, high watermark, size on disk,
//! segments, open transactions), its transactions (state, producer id
//! and epoch, partitions, age against timeout) with the hanging ones
//! first and the command that aborts each, and its consumer groups with
//! their lag, to the high watermark and to the LSO: a read_committed
//! consumer whose lag is all beyond the LSO is waiting for a transaction,
//! not slow.
//!
//! `gather` asks (see `source.rs`), `render` draws; only `render` is
//! needed to test the page.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use doze_core::limits::{
    CONSOLE_GROUPS_SHOWN_MAX, CONSOLE_PARTITIONS_SHOWN_MAX, CONSOLE_TRANSACTIONS_SHOWN_MAX,
};

use super::html::{count, duration, esc, human_bytes, page, url_part, utc};
use super::source::{self, ConsoleClient, DiskUse};
use super::txns::{self, OpenTxn, Status};
use super::BrokerFacts;
use crate::client::{
    self, Isolation, KafkaError, OffsetSpec, TopicPartition, TransactionDescription,
    TransactionFilter,
};
use crate::tools::transactions::abort_command;

/// One partition's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRow {
    pub tp: TopicPartition,
    pub internal: bool,
    pub log_start: Option<i64>,
    pub lso: Option<i64>,
    pub high_watermark: Option<i64>,
    pub disk: Option<DiskUse>,
    /// Open transactions on it.
    pub open: usize,
}

/// A group's committed offset of one partition and its lag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOffset {
    pub tp: TopicPartition,
    pub committed: i64,
    pub high_watermark: Option<i64>,
    pub lso: Option<i64>,
}

impl GroupOffset {
    /// Records the group has not consumed (to the high watermark, as
    /// Kafka's kafka-consumer-groups shows it).
    pub fn lag(&self) -> Option<i64> {
        self.high_watermark.map(|hw| (hw - self.committed).max(0))
    }

    /// Of those, the ones a read_committed consumer may read now (to the LSO).
    pub fn lag_to_lso(&self) -> Option<i64> {
        self.lso.map(|lso| (lso - self.committed).max(0))
    }
}

/// A group's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRow {
    pub group_id: String,
    pub state: String,
    pub members: usize,
    pub offsets: Vec<GroupOffset>,
    /// Why it could not be described.
    pub error: Option<String>,
}

/// Everything the page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub now_ms: i64,
    pub cluster_id: Option<String>,
    pub partitions: Vec<PartitionRow>,
    /// Partitions there are (more than listed if past the bound).
    pub partitions_total: usize,
    pub transactions: Vec<TransactionDescription>,
    pub transactions_total: usize,
    /// Open on partitions, judged (`txns`).
    pub open: Vec<OpenTxn>,
    pub groups: Vec<GroupRow>,
    pub groups_total: usize,
    /// What could not be asked, shown at the top.
    pub notes: Vec<String>,
}

/// Asks the broker everything the page shows.
pub async fn gather(
    client: &mut ConsoleClient,
    facts: &BrokerFacts,
) -> Result<ClusterView, client::Error> {
    let now_ms = source::now_ms();
    let mut view = ClusterView {
        now_ms,
        cluster_id: client.cluster().await?.cluster_id,
        ..ClusterView::default()
    };

    // Topics and partitions, their offsets, producers and size on disk.
    let topics = client.list_topics().await?;
    let mut all: Vec<(TopicPartition, bool)> = Vec::new();
    for t in &topics {
        for p in &t.partitions {
            all.push((TopicPartition::new(t.name.clone(), p.partition), t.internal));
        }
    }
    view.partitions_total = all.len();
    all.truncate(CONSOLE_PARTITIONS_SHOWN_MAX);
    let tps: Vec<TopicPartition> = all.iter().map(|(tp, _)| tp.clone()).collect();
    let offsets = |m: BTreeMap<TopicPartition, Result<i64, KafkaError>>| -> BTreeMap<_, _> {
        m.into_iter()
            .filter_map(|(tp, o)| Some((tp, o.ok()?)))
            .collect()
    };
    let (starts, hws, lsos) = if tps.is_empty() {
        Default::default()
    } else {
        (
            offsets(
                client
                    .list_offsets(&tps, OffsetSpec::Earliest, Isolation::ReadUncommitted)
                    .await?,
            ),
            offsets(
                client
                    .list_offsets(&tps, OffsetSpec::Latest, Isolation::ReadUncommitted)
                    .await?,
            ),
            offsets(
                client
                    .list_offsets(&tps, OffsetSpec::Latest, Isolation::ReadCommitted)
                    .await?,
            ),
        )
    };
    let mut producers = Vec::new();
    if !tps.is_empty() {
        for (tp, states) in client.describe_producers_of(&tps).await? {
            match states {
                Ok(states) => producers.extend(states.into_iter().map(|p| (tp.clone(), p))),
                Err(e) => view.notes.push(format!("producers of {tp}: {e}")),
            }
        }
    }
    view.open =
        txns::open_transactions(client, producers, facts.transaction_max_timeout_ms, now_ms)
            .await?;
    let disk = source::disk_use_of(facts.logs_dir.clone(), tps.clone()).await;
    view.partitions = all
        .into_iter()
        .map(|(tp, internal)| PartitionRow {
            log_start: starts.get(&tp).copied(),
            lso: lsos.get(&tp).copied(),
            high_watermark: hws.get(&tp).copied(),
            disk: disk.get(&tp).copied(),
            open: view.open.iter().filter(|o| o.tp == tp).count(),
            internal,
            tp,
        })
        .collect();

    // Transactions, as their coordinators know them.
    let listed = client
        .list_transactions(&TransactionFilter::default())
        .await?;
    view.transactions_total = listed.len();
    let described = txns::describe_each(
        client,
        listed
            .into_iter()
            .take(CONSOLE_TRANSACTIONS_SHOWN_MAX)
            .map(|t| t.transactional_id),
    )
    .await?;
    view.transactions = described.into_values().collect();

    // Consumer groups and their lag.
    let mut groups = client.list_groups().await?;
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    view.groups_total = groups.len();
    for g in groups.into_iter().take(CONSOLE_GROUPS_SHOWN_MAX) {
        let mut row = GroupRow {
            group_id: g.group_id.clone(),
            state: g.state.clone().unwrap_or_default(),
            members: 0,
            offsets: Vec::new(),
            error: None,
        };
        match client.describe_group(&g.group_id).await {
            Ok(d) => {
                row.state = d.state;
                row.members = d.members.len();
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        match client.committed_offsets(&g.group_id).await {
            Ok(committed) => {
                row.offsets = committed
                    .into_iter()
                    .map(|c| {
                        let tp = TopicPartition::new(c.topic, c.partition);
                        GroupOffset {
                            committed: c.offset,
                            high_watermark: hws.get(&tp).copied(),
                            lso: lsos.get(&tp).copied(),
                            tp,
                        }
                    })
                    .collect();
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        view.groups.push(row);
    }
    Ok(view)
}

/// The partition page's address.
pub fn partition_href(tp: &TopicPartition) -> String {
    format!("/topics/{}/{}", url_part(&tp.topic), tp.partition)
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "<span class=\"muted\">–</span>".into(), count)
}

/// The whole page.
pub fn render(view: &ClusterView, facts: &BrokerFacts) -> String {
    let mut b = String::new();
    let _ = write!(b, "<h1>Cluster</h1>");
    for note in &view.notes {
        let _ = write!(b, "<p class=\"error\">{}</p>", esc(note));
    }
    broker_section(&mut b, view, facts);
    attention_section(&mut b, view, facts);
    topics_section(&mut b, view);
    transactions_section(&mut b, view, facts);
    groups_section(&mut b, view);
    page("Cluster", &b)
}

fn broker_section(b: &mut String, view: &ClusterView, facts: &BrokerFacts) {
    let _ = write!(
        b,
        "<section id=\"broker\"><h2>Broker</h2><dl class=\"facts\">\
         <dt>node id</dt><dd data-node-id=\"{node}\">{node}</dd>\
         <dt>cluster id</dt><dd class=\"mono\">{cluster}</dd>\
         <dt>version</dt><dd>doze-kafka {version}</dd>\
         <dt>transaction.max.timeout.ms</dt><dd>{max} ({max_h})</dd>\
         <dt>data dir</dt><dd class=\"mono\">{data}</dd>\
         <dt>as of</dt><dd>{now}</dd></dl>",
        node = facts.node_id,
        cluster = esc(view.cluster_id.as_deref().unwrap_or("–")),
        version = esc(facts.version),
        max = facts.transaction_max_timeout_ms,
        max_h = duration(facts.transaction_max_timeout_ms),
        data = esc(&facts
            .logs_dir
            .as_ref()
            .and_then(|d| d.parent())
            .map_or_else(|| "–".into(), |d| d.display().to_string())),
        now = utc(view.now_ms),
    );
    let _ = write!(
        b,
        "<table class=\"listeners\"><thead><tr><th>listener</th><th>protocol</th>\
         <th>listening on</th><th>advertised as</th></tr></thead><tbody>"
    );
    for l in &facts.listeners {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
            esc(&l.name),
            esc(&l.protocol),
            esc(&l.bound),
            esc(&l.advertised)
        );
    }
    let _ = write!(
        b,
        "<tr><td>console</td><td>HTTP</td><td class=\"mono\">{}</td><td></td></tr></tbody></table></section>",
        esc(&facts.console_url)
    );
}

/// Hanging and overdue transactions first: what holds readers back.
fn attention_section(b: &mut String, view: &ClusterView, facts: &BrokerFacts) {
    let stuck: Vec<&OpenTxn> = view
        .open
        .iter()
        .filter(|o| o.status.needs_abort())
        .collect();
    if stuck.is_empty() {
        return;
    }
    let _ = write!(
        b,
        "<section id=\"attention\" class=\"error\"><strong>{} transaction{} hold{} \
         read_committed readers back and may never end by themselves:</strong>",
        stuck.len(),
        if stuck.len() == 1 { "" } else { "s" },
        if stuck.len() == 1 { "s" } else { "" },
    );
    for o in stuck {
        let _ = write!(
            b,
            "<p>{} of producer {} on <a href=\"{}?from={}\">{}</a> since offset {}</p>",
            status_badge(o.status),
            o.producer.producer_id,
            esc(&partition_href(&o.tp)),
            o.start_offset,
            esc(&o.tp.to_string()),
            o.start_offset
        );
        abort_block(b, o, facts);
    }
    let _ = write!(b, "</section>");
}

fn status_badge(status: Status) -> String {
    format!(
        "<span class=\"badge {0}\" data-status=\"{0}\">{0}</span>",
        status.name()
    )
}

/// The command that aborts `o`, for a hanging or overdue one.
pub fn abort_block(b: &mut String, o: &OpenTxn, facts: &BrokerFacts) {
    if !o.status.needs_abort() {
        return;
    }
    let Some(bootstrap) = &facts.tools_bootstrap else {
        let _ = write!(
            b,
            "<p class=\"muted\" data-abort-command-missing>No PLAINTEXT listener for \
             <code>doze-kafka transactions abort</code> to reach; abort it on partition {} from \
             offset {} with Kafka's <code>kafka-transactions.sh</code> and your listener's \
             security settings.</p>",
            esc(&o.tp.to_string()),
            o.start_offset
        );
        return;
    };
    let command = abort_command(bootstrap, &o.tp.topic, o.tp.partition, o.start_offset);
    let _ = write!(
        b,
        "<pre class=\"cmd\" data-abort-command>{}</pre>",
        esc(&command)
    );
}

fn topics_section(b: &mut String, view: &ClusterView) {
    let _ = write!(
        b,
        "<section id=\"topics\"><h2>Topics and partitions</h2>\
         <table><thead><tr><th>topic</th><th class=\"num\">partition</th>\
         <th class=\"num\">log start</th><th class=\"num\">LSO</th>\
         <th class=\"num\">high watermark</th>\
         <th class=\"num\" title=\"high watermark − LSO: what read_committed readers wait for\">LSO lag</th>\
         <th class=\"num\">size on disk</th><th class=\"num\">segments</th>\
         <th>open transactions</th></tr></thead><tbody>"
    );
    if view.partitions.is_empty() {
        let _ = write!(
            b,
            "<tr><td colspan=\"9\" class=\"muted\">no topics</td></tr>"
        );
    }
    for p in &view.partitions {
        let unstable = p.high_watermark.zip(p.lso).map(|(hw, lso)| hw - lso);
        let _ = write!(
            b,
            "<tr class=\"partition\" data-topic=\"{topic}\" data-partition=\"{part}\">\
             <td>{topic}{internal}</td><td class=\"num\"><a href=\"{href}\">{part}</a></td>\
             <td class=\"num\">{start}</td><td class=\"num\">{lso}</td><td class=\"num\">{hw}</td>\
             <td class=\"num\">{unstable}</td><td class=\"num\">{size}</td>\
             <td class=\"num\">{segments}</td><td>{open}</td></tr>",
            topic = esc(&p.tp.topic),
            internal = if p.internal {
                " <span class=\"muted\">(internal)</span>"
            } else {
                ""
            },
            part = p.tp.partition,
            href = esc(&partition_href(&p.tp)),
            start = opt(p.log_start),
            lso = opt(p.lso),
            hw = opt(p.high_watermark),
            unstable = opt(unstable),
            size = p
                .disk
                .map_or_else(|| "–".into(), |d| human_bytes(d.log_bytes)),
            segments = p
                .disk
                .map_or_else(|| "–".into(), |d| count(d.segments as i64)),
            open = if p.open == 0 {
                String::new()
            } else {
                format!("<span class=\"badge open\">{} open</span>", p.open)
            },
        );
    }
    let _ = write!(b, "</tbody></table>");
    if view.partitions_total > view.partitions.len() {
        let _ = write!(
            b,
            "<p class=\"muted\">{} more partitions not listed (at most {} are).</p>",
            view.partitions_total - view.partitions.len(),
            view.partitions.len()
        );
    }
    let _ = write!(b, "</section>");
}

fn transactions_section(b: &mut String, view: &ClusterView, facts: &BrokerFacts) {
    let _ = write!(
        b,
        "<section id=\"transactions\"><h2>Transactions</h2>\
         <p class=\"muted\">From the transaction coordinator: ListTransactions, \
         DescribeTransactions.</p>\
         <table><thead><tr><th>transactional id</th><th>state</th><th class=\"num\">producer id</th>\
         <th class=\"num\">epoch</th><th>partitions</th><th>started</th><th>age / timeout</th>\
         </tr></thead><tbody>"
    );
    if view.transactions.is_empty() {
        let _ = write!(
            b,
            "<tr><td colspan=\"7\" class=\"muted\">no transactional ids</td></tr>"
        );
    }
    for t in &view.transactions {
        let late = txns::overdue(t, view.now_ms);
        let partitions: Vec<String> = t
            .partitions
            .iter()
            .map(|tp| {
                format!(
                    "<a href=\"{}\">{}</a>",
                    esc(&partition_href(tp)),
                    esc(&tp.to_string())
                )
            })
            .collect();
        let open = matches!(
            t.state.as_str(),
            "Ongoing" | "PrepareCommit" | "PrepareAbort"
        );
        let age = match t.start_time_ms.filter(|_| open) {
            Some(start) => format!(
                "{} of {}{}",
                duration(view.now_ms - start),
                duration(i64::from(t.timeout_ms)),
                if late {
                    format!(" {}", status_badge(Status::Overdue))
                } else {
                    String::new()
                }
            ),
            None => format!(
                "<span class=\"muted\">timeout {}</span>",
                duration(i64::from(t.timeout_ms))
            ),
        };
        let _ = write!(
            b,
            "<tr class=\"txn\" data-transactional-id=\"{id}\" data-state=\"{state}\" \
             data-producer-id=\"{pid}\"><td class=\"mono\">{id}</td><td>{state}</td>\
             <td class=\"num\">{pid}</td><td class=\"num\">{epoch}</td><td>{parts}</td>\
             <td>{started}</td><td>{age}</td></tr>",
            id = esc(&t.transactional_id),
            state = esc(&t.state),
            pid = t.producer_id,
            epoch = t.producer_epoch,
            parts = partitions.join(", "),
            started = t.start_time_ms.map_or_else(String::new, utc),
        );
    }
    let _ = write!(b, "</tbody></table>");
    if view.transactions_total > view.transactions.len() {
        let _ = write!(
            b,
            "<p class=\"muted\">{} transactional ids listed by the coordinator are not \
             described here (at most {CONSOLE_TRANSACTIONS_SHOWN_MAX} are).</p>",
            view.transactions_total - view.transactions.len()
        );
    }

    let _ = write!(
        b,
        "<h3>Open on partitions</h3><p class=\"muted\">From the partitions: DescribeProducers. \
         The first one on a partition holds its LSO.</p>\
         <table><thead><tr><th>partition</th><th class=\"num\">start offset</th>\
         <th class=\"num\">producer id</th><th class=\"num\">epoch</th><th>transactional id</th>\
         <th>last write</th><th>status</th></tr></thead><tbody>"
    );
    if view.open.is_empty() {
        let _ = write!(
            b,
            "<tr><td colspan=\"7\" class=\"muted\">none: every LSO is at its high watermark</td></tr>"
        );
    }
    for o in &view.open {
        let mut status = status_badge(o.status);
        abort_block(&mut status, o, facts);
        let _ = write!(
            b,
            "<tr class=\"open-txn\" data-topic=\"{topic}\" data-partition=\"{part}\" \
             data-producer-id=\"{pid}\" data-start-offset=\"{start}\" data-status=\"{st}\">\
             <td><a href=\"{href}?from={start}\">{tp}</a></td><td class=\"num\">{start}</td>\
             <td class=\"num\">{pid}</td><td class=\"num\">{epoch}</td><td class=\"mono\">{id}</td>\
             <td>{last} ({ago} ago)</td><td>{status}</td></tr>",
            topic = esc(&o.tp.topic),
            part = o.tp.partition,
            tp = esc(&o.tp.to_string()),
            href = esc(&partition_href(&o.tp)),
            start = o.start_offset,
            pid = o.producer.producer_id,
            epoch = o.producer.producer_epoch,
            st = o.status.name(),
            id = o.transactional_id.as_deref().map_or_else(
                || "<span class=\"muted\">unknown to any coordinator</span>".to_string(),
                |id| esc(id).to_string()
            ),
            last = utc(o.producer.last_timestamp),
            ago = duration(view.now_ms - o.producer.last_timestamp),
        );
    }
    let _ = write!(b, "</tbody></table></section>");
}

/// For a group that has read up to the LSO with more beyond it: the open
/// transaction it waits for (the answer to "why is my read_committed
/// consumer stuck?").
fn waiting_for(view: &ClusterView, o: &GroupOffset) -> String {
    let (Some(lso), Some(hw)) = (o.lso, o.high_watermark) else {
        return String::new();
    };
    if o.committed < lso || lso >= hw {
        return String::new();
    }
    let holder = view
        .open
        .iter()
        .find(|t| t.tp == o.tp && t.start_offset == lso);
    let Some(t) = holder else {
        return format!("a transaction open from offset {lso}");
    };
    let id = t
        .transactional_id
        .as_deref()
        .map_or_else(String::new, |id| format!(" ({})", esc(id)));
    format!(
        "<span data-waiting-for=\"{pid}\">{badge} <a href=\"{href}?from={lso}\">open \
         transaction of producer {pid}{id} since offset {lso}</a></span>",
        pid = t.producer.producer_id,
        badge = status_badge(t.status),
        href = esc(&partition_href(&t.tp)),
    )
}

fn groups_section(b: &mut String, view: &ClusterView) {
    let _ = write!(
        b,
        "<section id=\"groups\"><h2>Consumer groups</h2>\
         <p class=\"muted\">Lag to the high watermark; of it, what a read_committed consumer \
         may read now (to the LSO). Lag beyond the LSO waits for a transaction to end.</p>\
         <table><thead><tr><th>group</th><th>state</th><th class=\"num\">members</th>\
         <th>partition</th><th class=\"num\">committed</th><th class=\"num\">high watermark</th>\
         <th class=\"num\">LSO</th><th class=\"num\">lag</th><th class=\"num\">readable now</th>\
         <th>waiting for</th></tr></thead><tbody>"
    );
    if view.groups.is_empty() {
        let _ = write!(
            b,
            "<tr><td colspan=\"10\" class=\"muted\">no groups</td></tr>"
        );
    }
    for g in &view.groups {
        let rows = g.offsets.len().max(1);
        let head = format!(
            "<td rowspan=\"{rows}\" class=\"mono\">{id}</td><td rowspan=\"{rows}\">{state}{error}</td>\
             <td rowspan=\"{rows}\" class=\"num\">{members}</td>",
            id = esc(&g.group_id),
            state = esc(&g.state),
            error = g.error.as_deref().map_or_else(String::new, |e| format!(
                "<div class=\"error\">{}</div>",
                esc(e)
            )),
            members = g.members,
        );
        if g.offsets.is_empty() {
            let _ = write!(
                b,
                "<tr class=\"group\" data-group-id=\"{}\">{head}<td colspan=\"7\" class=\"muted\">\
                 no committed offsets</td></tr>",
                esc(&g.group_id)
            );
            continue;
        }
        for (i, o) in g.offsets.iter().enumerate() {
            let _ = write!(
                b,
                "<tr class=\"group-offset\" data-group-id=\"{gid}\" data-topic=\"{topic}\" \
                 data-partition=\"{part}\" data-lag=\"{lag_attr}\" data-readable=\"{readable_attr}\">{head}\
                 <td><a href=\"{href}?from={committed}\">{tp}</a></td><td class=\"num\">{committed}</td>\
                 <td class=\"num\">{hw}</td><td class=\"num\">{lso}</td><td class=\"num\">{lag}</td>\
                 <td class=\"num\">{now}</td><td>{waiting}</td></tr>",
                gid = esc(&g.group_id),
                topic = esc(&o.tp.topic),
                part = o.tp.partition,
                lag_attr = o.lag().map_or_else(String::new, |l| l.to_string()),
                readable_attr = o.lag_to_lso().map_or_else(String::new, |l| l.to_string()),
                head = if i == 0 { head.as_str() } else { "" },
                href = esc(&partition_href(&o.tp)),
                tp = esc(&o.tp.to_string()),
                committed = o.committed,
                hw = opt(o.high_watermark),
                lso = opt(o.lso),
                lag = opt(o.lag()),
                now = opt(o.lag_to_lso()),
                waiting = waiting_for(view, o),
            );
        }
    }
    let _ = write!(b, "</tbody></table>");
    if view.groups_total > view.groups.len() {
        let _ = write!(
            b,
            "<p class=\"muted\">{} more groups not described (at most {CONSOLE_GROUPS_SHOWN_MAX} are).</p>",
            view.groups_total - view.groups.len()
        );
    }
    let _ = write!(b, "</section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ProducerState;

    fn open(status: Status, id: Option<&str>) -> OpenTxn {
        OpenTxn {
            tp: TopicPartition::new("orders", 0),
            producer: ProducerState {
                producer_id: 7,
                producer_epoch: 2,
                last_sequence: 0,
                last_timestamp: 1_000,
                coordinator_epoch: None,
                current_txn_start_offset: Some(42),
            },
            start_offset: 42,
            transactional_id: id.map(Into::into),
            description: None,
            status,
        }
    }

    #[test]
    fn hanging_transactions_come_with_their_abort_command() {
        let view = ClusterView {
            now_ms: 2_000_000,
            open: vec![
                open(Status::Hanging, None),
                open(Status::Open, Some("fine")),
            ],
            ..ClusterView::default()
        };
        let html = render(&view, &BrokerFacts::for_tests());
        let command = "doze-kafka transactions --bootstrap-server 127.0.0.1:9092 abort \
                       --topic orders --partition 0 --start-offset 42";
        assert!(html.contains(command), "{html}");
        // Once at the top, once in its row; none for the open one.
        assert_eq!(html.matches("data-abort-command").count(), 2, "{html}");
        assert!(html.contains("1 transaction holds read_committed readers back"));
    }

    #[test]
    fn without_a_plaintext_listener_the_page_says_how_to_abort() {
        let view = ClusterView {
            now_ms: 2_000_000,
            open: vec![open(Status::Overdue, Some("late"))],
            ..ClusterView::default()
        };
        let facts = BrokerFacts {
            tools_bootstrap: None,
            ..BrokerFacts::for_tests()
        };
        let html = render(&view, &facts);
        assert!(!html.contains("data-abort-command>"), "{html}");
        assert!(html.contains("data-abort-command-missing"), "{html}");
        assert!(html.contains("kafka-transactions.sh"), "{html}");
    }

    #[test]
    fn hostile_ids_are_escaped() {
        let evil = "<script>alert(1)</script>\"'&";
        let view = ClusterView {
            now_ms: 2_000,
            transactions: vec![TransactionDescription {
                coordinator_id: 1,
                transactional_id: evil.into(),
                producer_id: 7,
                producer_epoch: 0,
                state: "Ongoing".into(),
                timeout_ms: 60_000,
                start_time_ms: Some(1_000),
                partitions: vec![TopicPartition::new("t", 0)],
            }],
            open: vec![open(Status::Open, Some(evil))],
            groups: vec![GroupRow {
                group_id: evil.into(),
                state: "Empty".into(),
                members: 0,
                offsets: vec![GroupOffset {
                    tp: TopicPartition::new("t", 0),
                    committed: 3,
                    high_watermark: Some(10),
                    lso: Some(5),
                }],
                error: None,
            }],
            ..ClusterView::default()
        };
        let html = render(&view, &BrokerFacts::for_tests());
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("\"'&\""), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"));
        // Lag 7, of which 2 readable now.
        assert!(html.contains("data-lag=\"7\""), "{html}");
    }

    #[test]
    fn lag_to_the_high_watermark_and_the_lso() {
        let o = GroupOffset {
            tp: TopicPartition::new("t", 0),
            committed: 5,
            high_watermark: Some(12),
            lso: Some(5),
        };
        assert_eq!(o.lag(), Some(7));
        assert_eq!(o.lag_to_lso(), Some(0), "all of it waits for a transaction");
    }
}
