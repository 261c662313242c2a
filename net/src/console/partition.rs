//! `/topics/{topic}/{partition}?from=OFFSET`: one partition's log, a page
//! at a time.
//!
//! The page fetches a bounded window from `from` (`CONSOLE_PAGE_LOG_BYTES`,
//! at most `CONSOLE_PAGE_RECORDS_MAX` records shown) twice through the
//! broker's Fetch, read_committed then read_uncommitted: never the whole
//! log. It draws the read_uncommitted answer as a list of batches (offsets,
//! producer id and epoch, transactional or not, record count, keys and
//! values), the markers as dividers labelled COMMIT or ABORT, and beside
//! each batch what a read_uncommitted and a read_committed reader get of
//! it, the latter worked out from the read_committed answer as a Kafka
//! consumer does (`window.rs`). The LSO is a line across the log, named
//! by the open transaction that holds it there.
//!
//! Reading a page's records is CPU work (a page deep in a compressed batch
//! decompresses and reads every record before it: about 130 ms for the
//! last page of a batch of a million), so it runs on the blocking pool, at
//! most `CONSOLE_PAGE_READS_MAX` at once, never on the runtime's workers,
//! which carry every client connection and the broker task.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use doze_core::limits::{
    CONSOLE_PAGE_LOG_BYTES, CONSOLE_PAGE_READS_MAX, CONSOLE_PAGE_RECORDS_MAX,
    CONSOLE_VALUE_CHARS_SHOWN,
};
use tokio::sync::Semaphore;

use super::cluster::{abort_block, partition_href};
use super::html::{count, duration, esc, human_bytes, page, utc};
use super::source::{self, ConsoleClient, DiskUse};
use super::txns::{self, OpenTxn};
use super::window::{self, Fate, ShownBatch, Window};
use super::BrokerFacts;
use crate::client::{self, Isolation, KafkaError, OffsetSpec, TopicPartition};

/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// Why a partition page is not drawn.
#[derive(Debug)]
pub enum Refusal {
    /// No such topic or partition: 404.
    Unknown,
    /// The broker could not be asked, or refused: an error page.
    Broker(client::Error),
}

impl From<client::Error> for Refusal {
    fn from(e: client::Error) -> Self {
        match &e {
            client::Error::Kafka(KafkaError { code, .. })
                if *code == UNKNOWN_TOPIC_OR_PARTITION =>
            {
                Refusal::Unknown
            }
            _ => Refusal::Broker(e),
        }
    }
}

/// Everything the page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    pub tp: TopicPartition,
    pub now_ms: i64,
    pub log_start: i64,
    pub high_watermark: i64,
    /// From the read_committed answer.
    pub lso: i64,
    pub disk: Option<DiskUse>,
    /// Where the page starts (the asked offset, brought into the log).
    pub from: i64,
    /// The offset asked for, when it was outside the log.
    pub asked_from: Option<i64>,
    pub window: Window,
    /// The read_committed answer's aborted transactions: (producer, first offset).
    pub aborted: Vec<(i64, i64)>,
    /// Transactions open on the partition, judged.
    pub open: Vec<OpenTxn>,
}

/// Asks the broker for the page of `tp` from `from` (None: the log start).
pub async fn gather(
    client: &mut ConsoleClient,
    facts: &BrokerFacts,
    tp: &TopicPartition,
    from: Option<i64>,
) -> Result<PartitionView, Refusal> {
    let now_ms = source::now_ms();
    let topic = client
        .describe_topics(std::slice::from_ref(&tp.topic))
        .await?;
    let known = topic
        .first()
        .is_some_and(|t| t.partitions.iter().any(|p| p.partition == tp.partition));
    if !known {
        return Err(Refusal::Unknown);
    }
    let one = std::slice::from_ref(tp);
    let offset_of = |mut m: BTreeMap<TopicPartition, Result<i64, KafkaError>>| {
        m.remove(tp)
            .unwrap_or_else(|| unreachable!("list_offsets answers every partition asked"))
            .map_err(client::Error::Kafka)
    };
    let log_start = offset_of(
        client
            .list_offsets(one, OffsetSpec::Earliest, Isolation::ReadUncommitted)
            .await?,
    )?;
    let end = offset_of(
        client
            .list_offsets(one, OffsetSpec::Latest, Isolation::ReadUncommitted)
            .await?,
    )?;
    let start = from.unwrap_or(log_start).clamp(log_start, end);
    let asked_from = from.filter(|&f| f != start);

    // read_committed first: what such a reader is sent, and the aborted
    // transactions it is told of; then everything, for the log itself.
    let committed = client
        .fetch_raw(tp, start, CONSOLE_PAGE_LOG_BYTES, Isolation::ReadCommitted)
        .await?;
    let all = client
        .fetch_raw(
            tp,
            start,
            CONSOLE_PAGE_LOG_BYTES,
            Isolation::ReadUncommitted,
        )
        .await?;
    let lso = committed
        .last_stable_offset
        .unwrap_or(committed.high_watermark);
    let (mut window, seen) = {
        static PAGE_READS: Semaphore = Semaphore::const_new(CONSOLE_PAGE_READS_MAX);
        let _turn = PAGE_READS
            .acquire()
            .await
            .expect("the page reads' semaphore is never closed");
        let (records, high_watermark) = (all.records.clone(), all.high_watermark);
        let committed_records = committed.records.clone();
        tokio::task::spawn_blocking(move || {
            let window = window::read_window(
                &records,
                start,
                high_watermark,
                CONSOLE_PAGE_RECORDS_MAX,
                CONSOLE_VALUE_CHARS_SHOWN,
            );
            (window, window::seen_batches(&committed_records))
        })
        .await
        .expect("reading a page's records does not panic")
    };
    let (delivered, skipped) = window::read_committed(&seen, &committed.aborted);
    window::judge_read_committed(&mut window, &delivered, &skipped, lso);

    let producers = client
        .describe_producers(tp)
        .await?
        .into_iter()
        .map(|p| (tp.clone(), p))
        .collect();
    let open = txns::open_transactions(client, producers, facts.transaction_max_timeout_ms, now_ms)
        .await?;
    let disk = source::disk_use_of(facts.logs_dir.clone(), vec![tp.clone()])
        .await
        .remove(tp);
    Ok(PartitionView {
        tp: tp.clone(),
        now_ms,
        log_start: all.log_start_offset.unwrap_or(log_start),
        high_watermark: all.high_watermark,
        lso,
        disk,
        from: start,
        asked_from,
        window,
        aborted: committed.aborted,
        open,
    })
}

/// The open transactions that hold the LSO where it is: those starting there.
fn holders(view: &PartitionView) -> Vec<&OpenTxn> {
    view.open
        .iter()
        .filter(|o| o.start_offset == view.lso)
        .collect()
}

fn page_href(tp: &TopicPartition, from: i64) -> String {
    format!("{}?from={from}", partition_href(tp))
}

/// The whole page.
pub fn render(view: &PartitionView, facts: &BrokerFacts) -> String {
    let mut b = String::new();
    let tp_name = view.tp.to_string();
    let _ = write!(
        b,
        "<h1>Partition <span class=\"mono\">{}</span></h1>",
        esc(&tp_name)
    );
    summary(&mut b, view);
    open_section(&mut b, view, facts);
    let _ = write!(b, "<section id=\"log\"><h2>Log</h2>");
    nav(&mut b, view);
    log_table(&mut b, view);
    nav(&mut b, view);
    let _ = write!(b, "</section>");
    page(&format!("Partition {tp_name}"), &b)
}

fn summary(b: &mut String, view: &PartitionView) {
    let held = view.high_watermark - view.lso;
    let _ = write!(
        b,
        "<dl class=\"facts\" id=\"summary\" data-log-start=\"{start}\" data-lso=\"{lso}\" \
         data-high-watermark=\"{hw}\">\
         <dt>log start</dt><dd>{start_s}</dd>\
         <dt>last stable offset (LSO)</dt><dd>{lso_s}</dd>\
         <dt>high watermark</dt><dd>{hw_s}</dd>\
         <dt>size on disk</dt><dd>{size}</dd>\
         <dt>segments</dt><dd>{segments}</dd>\
         <dt>as of</dt><dd>{now}</dd></dl>",
        start = view.log_start,
        lso = view.lso,
        hw = view.high_watermark,
        start_s = count(view.log_start),
        lso_s = count(view.lso),
        hw_s = count(view.high_watermark),
        size = view.disk.map_or_else(
            || "–".into(),
            |d| format!(
                "{} (+ {} of indexes)",
                human_bytes(d.log_bytes),
                human_bytes(d.index_bytes)
            )
        ),
        segments = view
            .disk
            .map_or_else(|| "–".into(), |d| count(d.segments as i64)),
        now = utc(view.now_ms),
    );
    if held > 0 {
        let _ = write!(
            b,
            "<p class=\"note\">read_committed readers stop at offset {}: {} offset{} between \
             the LSO and the high watermark wait for the transaction{} below to end.</p>",
            view.lso,
            count(held),
            if held == 1 { "" } else { "s" },
            if holders(view).len() == 1 { "" } else { "s" },
        );
    } else {
        let _ = write!(
            b,
            "<p class=\"muted\">No open transaction: read_committed readers read up to the \
             high watermark.</p>"
        );
    }
    if let Some(asked) = view.asked_from {
        let _ = write!(
            b,
            "<p class=\"note\">Offset {asked} is outside the log ({}–{}); showing from {}.</p>",
            view.log_start, view.high_watermark, view.from
        );
    }
}

fn open_section(b: &mut String, view: &PartitionView, facts: &BrokerFacts) {
    if view.open.is_empty() {
        return;
    }
    let _ = write!(
        b,
        "<section id=\"open\"><h2>Open transactions</h2><table><thead><tr>\
         <th class=\"num\">start offset</th><th class=\"num\">producer id</th>\
         <th class=\"num\">epoch</th><th>transactional id</th><th>age / timeout</th>\
         <th>last write</th><th>status</th></tr></thead><tbody>"
    );
    for o in &view.open {
        let age = o
            .description
            .as_ref()
            .and_then(|d| {
                let start = d.start_time_ms?;
                Some(format!(
                    "{} of {}",
                    duration(view.now_ms - start),
                    duration(i64::from(d.timeout_ms))
                ))
            })
            .unwrap_or_else(|| "<span class=\"muted\">–</span>".into());
        let mut status = format!(
            "<span class=\"badge {0}\" data-status=\"{0}\">{0}</span>",
            o.status.name()
        );
        if o.start_offset == view.lso {
            status.push_str(" <span class=\"badge holds\">holds the LSO</span>");
        }
        abort_block(&mut status, o, facts);
        let _ = write!(
            b,
            "<tr class=\"open-txn\" data-producer-id=\"{pid}\" data-start-offset=\"{start}\" \
             data-status=\"{st}\"><td class=\"num\"><a href=\"{href}\">{start}</a></td>\
             <td class=\"num\">{pid}</td><td class=\"num\">{epoch}</td><td class=\"mono\">{id}</td>\
             <td>{age}</td><td>{last}</td><td>{status}</td></tr>",
            pid = o.producer.producer_id,
            start = o.start_offset,
            st = o.status.name(),
            href = esc(&page_href(&view.tp, o.start_offset)),
            epoch = o.producer.producer_epoch,
            id = o.transactional_id.as_deref().map_or_else(
                || "<span class=\"muted\">unknown to any coordinator</span>".to_string(),
                |id| esc(id).to_string()
            ),
            last = utc(o.producer.last_timestamp),
        );
    }
    let _ = write!(b, "</tbody></table></section>");
}

/// Links to the previous and next pages, the log start, the LSO and the
/// end, and a box to jump to an offset (a plain GET form).
fn nav(b: &mut String, view: &PartitionView) {
    let tp = &view.tp;
    let shown_to = view.window.next_from.unwrap_or(view.high_watermark);
    let span = (shown_to - view.from).max(1);
    let _ = write!(b, "<nav class=\"pages\">");
    if view.from > view.log_start {
        let prev = (view.from - span).max(view.log_start);
        let _ = write!(
            b,
            "<a rel=\"prev\" href=\"{}\">← previous</a><a href=\"{}\">log start</a>",
            esc(&page_href(tp, prev)),
            esc(&page_href(tp, view.log_start))
        );
    }
    let _ = write!(
        b,
        "<span class=\"muted\">offsets {}–{} of {}–{}</span>",
        view.from, shown_to, view.log_start, view.high_watermark
    );
    if let Some(next) = view.window.next_from {
        let _ = write!(
            b,
            "<a rel=\"next\" href=\"{}\">next →</a>",
            esc(&page_href(tp, next))
        );
    }
    if view.lso < view.high_watermark && view.lso != view.from {
        let _ = write!(
            b,
            "<a href=\"{}\">at the LSO</a>",
            esc(&page_href(tp, view.lso))
        );
    }
    let _ = write!(
        b,
        "<form method=\"get\" action=\"{}\"><input name=\"from\" type=\"number\" \
         min=\"{}\" max=\"{}\" value=\"{}\" aria-label=\"from offset\"><button>go</button></form>\
         </nav>",
        esc(&partition_href(tp)),
        view.log_start,
        view.high_watermark,
        view.from
    );
}

fn log_table(b: &mut String, view: &PartitionView) {
    let _ = write!(
        b,
        "<table class=\"log\"><thead><tr><th class=\"num\">offsets</th><th>batch</th>\
         <th>read_uncommitted sees</th><th>read_committed sees</th></tr></thead><tbody>"
    );
    let open: BTreeMap<i64, i64> = view
        .open
        .iter()
        .map(|o| (o.producer.producer_id, o.start_offset))
        .collect();
    let open_batches = window::open_batches(&view.window, &open);
    let aborted_producers: BTreeSet<i64> = view.aborted.iter().map(|&(p, _)| p).collect();
    let line_at = window::lso_line_at(&view.window, view.lso, view.from);
    if view.window.batches.is_empty() {
        let _ = write!(
            b,
            "<tr><td colspan=\"4\" class=\"muted\">no records from offset {}</td></tr>",
            view.from
        );
    }
    for (i, batch) in view.window.batches.iter().enumerate() {
        if line_at == Some(i) {
            lso_line(b, view);
        }
        match batch.marker() {
            Some(_) => marker_row(b, batch),
            None if batch.control.is_some() => other_control_row(b, batch),
            None => data_row(
                b,
                batch,
                open_batches.contains(&batch.base_offset),
                aborted_producers.contains(&batch.producer_id),
            ),
        }
    }
    if line_at == Some(view.window.batches.len()) {
        lso_line(b, view);
    }
    if view.window.next_from.is_none() {
        let _ = write!(
            b,
            "<tr class=\"hw\" data-high-watermark=\"{0}\"><td colspan=\"4\"><div class=\"divider\">\
             high watermark {0}: the end of the log</div></td></tr>",
            view.high_watermark
        );
    }
    let _ = write!(b, "</tbody></table>");
}

/// The LSO as a line, named by what holds it.
fn lso_line(b: &mut String, view: &PartitionView) {
    let holders = holders(view);
    let (label, held_by) = if view.lso >= view.high_watermark {
        (
            format!(
                "LSO {}: at the high watermark, nothing holds read_committed readers back",
                view.lso
            ),
            String::new(),
        )
    } else if holders.is_empty() {
        (
            format!(
                "LSO {}: read_committed readers stop here (a transaction open from this offset \
                 holds them; DescribeProducers did not name it)",
                view.lso
            ),
            String::new(),
        )
    } else {
        let names: Vec<String> = holders
            .iter()
            .map(|o| {
                let id = o
                    .transactional_id
                    .as_deref()
                    .map_or_else(String::new, |id| format!(" ({})", esc(id)));
                format!(
                    "open transaction of producer {}{id} since offset {}",
                    o.producer.producer_id, o.start_offset
                )
            })
            .collect();
        let pids: Vec<String> = holders
            .iter()
            .map(|o| o.producer.producer_id.to_string())
            .collect();
        (
            format!(
                "LSO {}: {} holds read_committed readers here",
                view.lso,
                names.join(", and ")
            ),
            format!(" data-held-by=\"{}\"", pids.join(" ")),
        )
    };
    let _ = write!(
        b,
        "<tr class=\"lso\" data-lso=\"{}\"{held_by}><td colspan=\"4\">\
         <div class=\"divider\">{label}</div></td></tr>",
        view.lso
    );
}

fn marker_row(b: &mut String, batch: &ShownBatch) {
    let Some(window::Control::Marker {
        marker,
        coordinator_epoch,
    }) = &batch.control
    else {
        return;
    };
    let name = marker.name();
    let _ = write!(
        b,
        "<tr class=\"marker {class}\" data-marker=\"{name}\" data-offset=\"{offset}\" \
         data-producer-id=\"{pid}\"><td colspan=\"4\"><div class=\"divider\">{name} · \
         producer {pid} epoch {epoch} · offset {offset}{epoch_c}</div></td></tr>",
        class = name.to_ascii_lowercase(),
        offset = batch.base_offset,
        pid = batch.producer_id,
        epoch = batch.producer_epoch,
        epoch_c =
            coordinator_epoch.map_or_else(String::new, |e| format!(" · coordinator epoch {e}")),
    );
}

fn other_control_row(b: &mut String, batch: &ShownBatch) {
    let what = match &batch.control {
        Some(window::Control::Other(what)) => what.as_str(),
        _ => "control",
    };
    let _ = write!(
        b,
        "<tr class=\"marker other\" data-marker=\"OTHER\" data-offset=\"{}\"><td colspan=\"4\">\
         <div class=\"divider\">control batch: {}</div></td></tr>",
        batch.base_offset,
        esc(what)
    );
}

fn data_row(b: &mut String, batch: &ShownBatch, open: bool, aborted_producer: bool) {
    let mut badges = String::new();
    if batch.transactional {
        badges.push_str("<span class=\"badge open\">transactional</span> ");
    }
    if open {
        badges.push_str("<span class=\"badge open\">open transaction</span> ");
    }
    if batch.fate == Fate::Aborted {
        badges.push_str("<span class=\"badge hanging\">aborted</span> ");
    }
    if !batch.crc_ok {
        badges.push_str("<span class=\"badge hanging\">CRC mismatch</span> ");
    }
    let producer = if batch.producer_id >= 0 {
        format!(
            "producer {} epoch {}",
            batch.producer_id, batch.producer_epoch
        )
    } else {
        "no producer id".into()
    };
    let mut info = format!(
        "{badges}<div>{producer}</div><div class=\"muted\">{} record{} · {} · {}</div>",
        batch.count,
        if batch.count == 1 { "" } else { "s" },
        human_bytes(batch.size as u64),
        batch.codec,
    );
    if let Some(e) = &batch.records_error {
        let _ = write!(info, "<div class=\"error\">{}</div>", esc(e));
    }
    let records = records_list(batch);
    let committed = match batch.fate {
        Fate::Delivered => records.clone(),
        Fate::Aborted => format!(
            "skipped: the transaction of producer {} was aborted",
            batch.producer_id
        ),
        Fate::BeyondLso => "not yet: at or above the LSO".into(),
        Fate::NotFetched => "not in the read_committed answer (the log moved)".into(),
        Fate::Control => String::new(),
    };
    let committed_class = if batch.fate == Fate::Delivered {
        "reader rc"
    } else {
        "reader rc skip"
    };
    let _ = write!(
        b,
        "<tr class=\"batch{txn}\" data-base-offset=\"{base}\" data-last-offset=\"{last}\" \
         data-producer-id=\"{pid}\" data-transactional=\"{transactional}\" data-rc=\"{fate}\"{ab}>\
         <td class=\"num mono\">{offsets}</td><td class=\"batch\">{info}</td>\
         <td class=\"reader ru\">{records}</td><td class=\"{committed_class}\">{committed}</td></tr>",
        txn = if batch.transactional { " txn" } else { "" },
        offsets = if batch.base_offset == batch.last_offset {
            batch.base_offset.to_string()
        } else {
            format!("{}–{}", batch.base_offset, batch.last_offset)
        },
        base = batch.base_offset,
        last = batch.last_offset,
        pid = batch.producer_id,
        transactional = batch.transactional,
        fate = batch.fate.name(),
        ab = if aborted_producer {
            " data-aborted-producer"
        } else {
            ""
        },
    );
}

/// A batch's records as a reader gets them: offset, key → value.
fn records_list(batch: &ShownBatch) -> String {
    let mut out = String::from("<ul class=\"recs\">");
    if batch.records_before_from > 0 {
        let _ = write!(
            out,
            "<li class=\"muted\">({} before this page)</li>",
            batch.records_before_from
        );
    }
    for r in &batch.records {
        let _ = write!(
            out,
            "<li class=\"rec\" data-offset=\"{o}\" title=\"{t}\"><span class=\"off\">{o}</span> \
             {k} → {v}{h}</li>",
            o = r.offset,
            t = utc(r.timestamp),
            k = r.key_html,
            v = r.value_html,
            h = if r.headers > 0 {
                format!(" <span class=\"muted\">+{} headers</span>", r.headers)
            } else {
                String::new()
            },
        );
    }
    if batch.records_left_out > 0 {
        let _ = write!(
            out,
            "<li class=\"muted\">({} more on the next page)</li>",
            batch.records_left_out
        );
    }
    out.push_str("</ul>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ProducerState;
    use window::tests::log;

    /// The test log of `window.rs` with producer 9 open from 6 (the LSO).
    fn view() -> PartitionView {
        let bytes = log();
        let mut w = window::read_window(&bytes, 0, 8, 100, 50);
        let committed_end: usize = {
            // Everything before producer 9's batch at 6.
            let mut end = 0;
            let size = bytes.len() as u64;
            while let Ok(crate::batches::Next::Batch(h, b)) =
                crate::batches::next_batch(&bytes[..], end as u64, size)
            {
                if h.base_offset >= 6 {
                    break;
                }
                end += b.len();
            }
            end
        };
        let seen = window::seen_batches(&bytes[..committed_end]);
        let (delivered, skipped) = window::read_committed(&seen, &[(8, 3)]);
        window::judge_read_committed(&mut w, &delivered, &skipped, 6);
        PartitionView {
            tp: TopicPartition::new("t", 0),
            now_ms: 10_000,
            log_start: 0,
            high_watermark: 8,
            lso: 6,
            disk: None,
            from: 0,
            asked_from: None,
            window: w,
            aborted: vec![(8, 3)],
            open: vec![OpenTxn {
                tp: TopicPartition::new("t", 0),
                producer: ProducerState {
                    producer_id: 9,
                    producer_epoch: 0,
                    last_sequence: 0,
                    last_timestamp: 1_000,
                    coordinator_epoch: None,
                    current_txn_start_offset: Some(6),
                },
                start_offset: 6,
                transactional_id: Some("<b>open</b>".into()),
                description: None,
                status: txns::Status::Open,
            }],
        }
    }

    #[test]
    fn the_page_draws_markers_readers_and_the_lso() {
        let html = render(&view(), &BrokerFacts::for_tests());
        assert!(html.contains("data-marker=\"COMMIT\""), "{html}");
        assert!(html.contains("data-marker=\"ABORT\""), "{html}");
        // The aborted batch: in the read_uncommitted column, not in the
        // read_committed one.
        assert!(html.contains("data-base-offset=\"3\" data-last-offset=\"4\" data-producer-id=\"8\" data-transactional=\"true\" data-rc=\"aborted\""), "{html}");
        // The LSO line names its holder, escaped, before batch 6.
        let line = html
            .find("<tr class=\"lso\" data-lso=\"6\" data-held-by=\"9\">")
            .expect("the LSO line");
        let batch_6 = html.find("data-base-offset=\"6\"").unwrap();
        let marker_5 = html.find("data-offset=\"5\"").unwrap();
        assert!(marker_5 < line && line < batch_6, "{html}");
        assert!(html.contains(
            "LSO 6: open transaction of producer 9 (&lt;b&gt;open&lt;/b&gt;) since offset 6 holds read_committed readers here"
        ), "{html}");
        assert!(html.contains("data-rc=\"beyond-lso\""));
        assert!(!html.contains("<b>open"), "{html}");
        // The whole log fits: the end is drawn, no next page.
        assert!(html.contains("class=\"hw\""));
        assert!(!html.contains("rel=\"next\""));
    }

    #[test]
    fn paging_links() {
        let mut v = view();
        v.from = 3;
        v.window.next_from = Some(6);
        let html = render(&v, &BrokerFacts::for_tests());
        assert!(html.contains("href=\"/topics/t/0?from=6\">next"), "{html}");
        assert!(
            html.contains("href=\"/topics/t/0?from=0\">← previous"),
            "{html}"
        );
        assert!(!html.contains("class=\"hw\""), "not the end");
    }
}
