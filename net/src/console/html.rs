//! HTML for the console's pages: escaping, URL parts, the page shell with
//! its stylesheet, and how numbers, times and record bytes are shown.
//!
//! Every string that comes from the broker or the request (topic names,
//! group ids, transactional ids, record keys and values, error messages)
//! goes into a page through `esc` (text and attribute values, quoted with
//! `"`) or `url_part` (a path segment or query value). Topic names are
//! restricted by Kafka, group and transactional ids and record bytes are
//! not: a page must show `<script>` as text, never run it. The pages have
//! no JavaScript at all, and the Content-Security-Policy header
//! (`mod.rs`) forbids any.

use std::fmt::{self, Display, Write as _};

use crate::dump_log::escape_text;

/// Text made safe for HTML text and double- or single-quoted attribute values.
pub struct Escaped<'a>(pub &'a str);

pub fn esc(text: &str) -> Escaped<'_> {
    Escaped(text)
}

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

/// A path segment or query value: every byte but RFC 3986's unreserved
/// ones percent-encoded.
pub fn url_part(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `%XX` decoded (and `+` as a space when `plus_is_space`, as in a query);
/// None for a `%` not followed by two hex digits.
pub fn percent_decode(text: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The value of `name` in a query string (`a=1&b=2`), decoded; the first
/// if it is there several times. None if absent or not UTF-8.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != name {
            return None;
        }
        String::from_utf8(percent_decode(value, true)?).ok()
    })
}

/// The page shell: title, stylesheet, the header with links to the pages,
/// and `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · doze-kafka</title><style>{STYLE}</style></head>\n<body>\
         <header><a class=\"home\" href=\"/\">doze-kafka console</a>\
         <a href=\"/metrics\">metrics</a></header>\n<main>\n{body}</main></body></html>\n",
        esc(title)
    )
}

/// Small, offline, no web fonts: system fonts, a table style, the markers
/// as dividers, the LSO as a line.
const STYLE: &str = "\
:root{--fg:#1d2330;--muted:#6b7384;--line:#d9dde5;--bg:#fff;--soft:#f4f6f9;\
--commit:#177245;--abort:#b3261e;--lso:#b26b00;--open:#7a4fd0}\
*{box-sizing:border-box}\
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}\
header{display:flex;gap:1.5em;align-items:baseline;padding:.6em 1.2em;background:#1d2330}\
header a{color:#e8ebf2;text-decoration:none}header a.home{font-weight:600}\
main{padding:1em 1.2em 3em;max-width:1600px}\
h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.6em 0 .5em}\
a{color:#2457c5}\
table{border-collapse:collapse;width:100%;margin:.3em 0 1em}\
th,td{border-bottom:1px solid var(--line);padding:.3em .55em;text-align:left;vertical-align:top}\
th{background:var(--soft);font-weight:600;font-size:.92em}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em}\
.muted{color:var(--muted)}\
.facts{display:grid;grid-template-columns:max-content auto;gap:.15em 1.2em;margin:.3em 0 1em}\
.facts dt{color:var(--muted)}.facts dd{margin:0}\
.badge{display:inline-block;padding:0 .45em;border-radius:.6em;font-size:.85em;font-weight:600}\
.badge.open{background:#efe8fb;color:var(--open)}\
.badge.hanging,.badge.overdue{background:#fbe9e7;color:var(--abort)}\
.badge.ok{background:#e6f4ea;color:var(--commit)}.badge.holds{background:#fff3e0;color:var(--lso)}\
.note{background:#fff8e6;border-left:4px solid var(--lso);padding:.5em .8em;margin:.6em 0}\
.error{background:#fbe9e7;border-left:4px solid var(--abort);padding:.5em .8em;margin:.6em 0}\
pre.cmd{background:#1d2330;color:#e8ebf2;padding:.5em .8em;border-radius:4px;white-space:pre-wrap;word-break:break-all;margin:.3em 0}\
ul.recs{list-style:none;margin:0;padding:0}\
ul.recs li{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;white-space:pre-wrap;word-break:break-all}\
.off{color:var(--muted)}.null{color:var(--muted);font-style:italic}.cut{color:var(--lso)}\
td.skip{color:var(--muted);font-style:italic;background:repeating-linear-gradient(135deg,#fafafa,#fafafa 6px,#f1f1f1 6px,#f1f1f1 12px)}\
tr.batch.txn td.batch{border-left:4px solid var(--open)}\
tr.marker td{padding:.15em 0;border-bottom:none}\
.divider{display:flex;align-items:center;gap:.8em;font-weight:600;font-size:.9em}\
.divider::before,.divider::after{content:'';flex:1;border-top:2px solid currentColor}\
tr.marker.commit .divider{color:var(--commit)}tr.marker.abort .divider{color:var(--abort)}\
tr.lso td{border-bottom:none;padding:.2em 0}\
tr.lso .divider{color:var(--lso)}tr.lso .divider::before,tr.lso .divider::after{border-top:3px dashed var(--lso)}\
tr.hw .divider{color:var(--muted)}\
nav.pages{display:flex;gap:1em;align-items:center;flex-wrap:wrap;margin:.6em 0}\
nav.pages form{display:inline-flex;gap:.4em}\
";

/// A count with thousands separated (`12 345`).
pub fn count(n: impl Into<i128>) -> String {
    let n: i128 = n.into();
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// Bytes as B, KiB, MiB, GiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration in the largest two units (`3 min 12 s`, `850 ms`).
pub fn duration(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", duration(ms.saturating_neg()));
    }
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let s = ms / 1_000;
    let (big, big_unit, small, small_unit) = match s {
        0..60 => return format!("{s} s"),
        60..3_600 => (s / 60, "min", s % 60, "s"),
        3_600..86_400 => (s / 3_600, "h", s % 3_600 / 60, "min"),
        _ => (s / 86_400, "d", s % 86_400 / 3_600, "h"),
    };
    if small == 0 {
        format!("{big} {big_unit}")
    } else {
        format!("{big} {big_unit} {small} {small_unit}")
    }
}

/// Epoch milliseconds as UTC (`2025-01-31 12:34:56Z`).
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1_000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (y, m, d).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A record's key or value as a page shows it, already escaped for HTML:
/// `null`, UTF-8 text (control characters as `\u{..}`), or hex for bytes
/// that are not UTF-8; cut at `chars_max` characters with a mark.
pub fn record_bytes(bytes: Option<&[u8]>, chars_max: usize) -> String {
    let Some(bytes) = bytes else {
        return "<span class=\"null\">null</span>".into();
    };
    let (text, cut) = match std::str::from_utf8(bytes) {
        Ok(text) => {
            let shown = escape_text(text);
            match shown.char_indices().nth(chars_max) {
                Some((at, _)) => (shown[..at].to_string(), true),
                None => (shown, false),
            }
        }
        Err(_) => {
            let take = bytes.len().min(chars_max / 2);
            let mut hex = String::from("0x");
            for b in &bytes[..take] {
                let _ = write!(hex, "{b:02x}");
            }
            (hex, take < bytes.len())
        }
    };
    let mut out = esc(&text).to_string();
    if cut {
        let _ = write!(
            out,
            "<span class=\"cut\" title=\"{} bytes in all\">…</span>",
            bytes.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped() {
        let evil = "<script>alert(\"x\")</script> & 'y'";
        assert_eq!(
            esc(evil).to_string(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(esc("plain").to_string(), "plain");
        let shown = record_bytes(Some(evil.as_bytes()), 200);
        assert!(!shown.contains('<') || shown.starts_with("&lt;"), "{shown}");
        assert!(!shown.contains("<script"), "{shown}");
    }

    #[test]
    fn url_parts_round_trip() {
        for text in ["a b/c?d#e&f=g", "<script>", "é", "topic.name_-1"] {
            let encoded = url_part(text);
            assert!(
                encoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
                "{encoded}"
            );
            assert_eq!(percent_decode(&encoded, false).unwrap(), text.as_bytes());
        }
        assert_eq!(url_part("topic.name_-1"), "topic.name_-1");
        assert_eq!(percent_decode("%zz", false), None);
        assert_eq!(percent_decode("%4", false), None);
        assert_eq!(percent_decode("a+b", true).unwrap(), b"a b");
    }

    #[test]
    fn query_params() {
        assert_eq!(
            query_param(Some("from=12&x=1"), "from").as_deref(),
            Some("12")
        );
        assert_eq!(
            query_param(Some("x=1&from=%31"), "from").as_deref(),
            Some("1")
        );
        assert_eq!(query_param(Some("fromage=1"), "from"), None);
        assert_eq!(query_param(None, "from"), None);
        assert_eq!(query_param(Some("from"), "from").as_deref(), Some(""));
    }

    #[test]
    fn record_bytes_are_cut_and_marked() {
        assert_eq!(record_bytes(None, 10), "<span class=\"null\">null</span>");
        assert_eq!(record_bytes(Some(b"short"), 10), "short");
        let long = record_bytes(Some(b"abcdefghijklmnop"), 4);
        assert!(long.starts_with("abcd<span class=\"cut\""), "{long}");
        assert!(long.contains("16 bytes in all"), "{long}");
        // Not UTF-8: hex, cut too.
        assert_eq!(record_bytes(Some(&[0xff, 0x00]), 10), "0xff00");
        assert!(record_bytes(Some(&[0xff; 40]), 10).starts_with("0xffffffffff<span"));
        // Control characters cannot reach the page raw.
        assert_eq!(record_bytes(Some(b"a\x1bb\n"), 20), "a\\u{1b}b\\n");
        // Cut on a character boundary.
        assert_eq!(
            record_bytes(Some("ééé".as_bytes()), 2)
                .chars()
                .take(2)
                .collect::<String>(),
            "éé"
        );
    }

    #[test]
    fn numbers_and_times() {
        assert_eq!(count(1234567), "1\u{202f}234\u{202f}567");
        assert_eq!(count(-12), "-12");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(192_000), "3 min 12 s");
        assert_eq!(duration(600_000), "10 min");
        assert_eq!(duration(900_000), "15 min");
        assert_eq!(duration(90_000_000), "1 d 1 h");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(1_738_326_896_000), "2025-01-31 12:34:56Z");
    }
}
