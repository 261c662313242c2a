"""The web console (doze.console.listen) in headless Chromium.

One partition holds, in order:
    0,1  a committed transaction          2  its COMMIT marker
    3,4  an aborted transaction           5  its ABORT marker
    6    an open transaction (never ended; long timeout) -- the LSO stays at 6
    7    a committed transaction          8  its COMMIT marker
so the high watermark is 9, a read_uncommitted reader gets 0,1,3,4,6,7 and a
read_committed reader 0,1 only (3,4 aborted; 6 and 7 at or above the LSO).

Chromium loads the cluster page and the partition page; `--dump-dom` gives the
DOM it built, which the tests read by the pages' stable attributes
(`data-marker`, `data-lso`, `data-held-by`, `data-offset`, ...). A screenshot
of each page goes to the test's tmp dir and to tests/output/ (git-ignored).

The other tests: hostile ids and record bytes are shown escaped; the
console sees everything behind a SASL-only listener with deny-by-default
ACLs; an overdue transaction's abort command, run as shown, ends it; the
pages of a 300 KB log show every record once.

Chromium comes from Debian (`make chromium`, which `make wire` runs); without
it these tests skip and say so (under CI=true they fail).
"""

import html.parser
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import free_port, free_ports, missing_dependency
from txnutil import TXN_BROKER_SETS, end_offsets, txn_producer_conf, wait_until
from wireutil import consumer, create_topic, unique_topic

HERE = pathlib.Path(__file__).resolve().parent
OUTPUT = HERE / "output"
CHROMIUM_TIMEOUT_S = 90
HTTP_TIMEOUT_S = 30
EVIL = "<script>alert(1)</script>"


def chromium_binary():
    for candidate in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    missing_dependency("Chromium is not installed: `make chromium` installs the Debian package "
                       "`chromium` with apt-get (as root)")


def chromium(args, tmp_path):
    """One headless Chromium run with a fresh profile; its stdout."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    cmd = [
        chromium_binary(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, timeout=CHROMIUM_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (
        f"chromium exited {done.returncode}: {cmd}\n{done.stderr.decode(errors='replace')[-3000:]}")
    return done.stdout.decode()


def dom(url, tmp_path):
    """The DOM Chromium built for `url`, as a tree."""
    text = chromium(["--dump-dom", url], tmp_path)
    assert "<html" in text, f"no DOM for {url}: {text[:500]!r}"
    return parse(text)


def screenshot(url, tmp_path, name):
    """A 1400x2000 screenshot of `url` in tmp_path and in tests/output/."""
    path = tmp_path / name
    chromium([f"--screenshot={path}", "--window-size=1400,2000", url], tmp_path)
    assert path.exists() and path.stat().st_size > 0, f"no screenshot of {url}"
    OUTPUT.mkdir(exist_ok=True)
    shutil.copy(path, OUTPUT / name)
    return path


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.walk()

    def find_all(self, tag=None, cls=None, **attrs):
        """Elements by tag, by a class they have, and by attributes
        (data_marker="COMMIT" is data-marker; None: present with any value)."""
        out = []
        for n in self.walk():
            if tag and n.tag != tag:
                continue
            if cls and cls not in (n.attrs.get("class") or "").split():
                continue
            ok = True
            for k, v in attrs.items():
                name = k.replace("_", "-")
                if name not in n.attrs or (v is not None and n.attrs[name] != str(v)):
                    ok = False
            if ok:
                out.append(n)
        return out


class TreeBuilder(html.parser.HTMLParser):
    VOID = {"meta", "input", "br", "img", "link", "hr", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(text):
    b = TreeBuilder()
    b.feed(text)
    b.close()
    return b.root


def http_get(url):
    """(status, headers, body) of a plain GET."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


@pytest.fixture
def console_broker(start_broker):
    port = free_port()
    b = start_broker(sets=[*TXN_BROKER_SETS, f"doze.console.listen=127.0.0.1:{port}"])
    b.console = f"http://127.0.0.1:{port}"
    return b


def transaction(broker, txn_id, topic, values, end, **conf):
    """A transaction of `values` on partition 0; end: "commit", "abort" or None
    (left open; the producer is returned so that it stays alive)."""
    p = Producer(txn_producer_conf(broker, txn_id, **conf))
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        key, value = v if isinstance(v, tuple) else (None, v)
        p.produce(topic, key=key, value=value, partition=0)
    assert p.flush(30) == 0
    if end == "commit":
        p.commit_transaction(30)
    elif end == "abort":
        p.abort_transaction(30)
    return p


# An open transaction's timeout: longer than any test, within the broker's
# default transaction.max.timeout.ms (15 min).
OPEN_TIMEOUT = {"transaction.timeout.ms": 600_000}


@pytest.mark.timeout(300)
def test_console_shows_markers_readers_and_the_lso(console_broker, tmp_path):
    b = console_broker
    topic = create_topic(b, unique_topic("console"), 1)
    open_id = unique_topic("console-open")
    transaction(b, unique_topic("console-commit"), topic, [b"committed-0", b"committed-1"], "commit")
    transaction(b, unique_topic("console-abort"), topic, [b"aborted-3", b"aborted-4"], "abort")
    holder = transaction(b, open_id, topic, [b"open-6"], None, **OPEN_TIMEOUT)
    transaction(b, unique_topic("console-after"), topic, [b"committed-7"], "commit")
    assert end_offsets(b, topic, [0], "read_uncommitted") == {0: 9}
    assert end_offsets(b, topic, [0], "read_committed") == {0: 6}

    # The partition page.
    url = f"{b.console}/topics/{topic}/0"
    page = dom(url, tmp_path)
    commits = page.find_all("tr", data_marker="COMMIT")
    aborts = page.find_all("tr", data_marker="ABORT")
    assert [n.attrs["data-offset"] for n in commits] == ["2", "8"], page.text()
    assert [n.attrs["data-offset"] for n in aborts] == ["5"], page.text()
    assert "COMMIT" in commits[0].text() and "ABORT" in aborts[0].text()

    def offsets(reader_cls):
        return sorted(int(li.attrs["data-offset"])
                      for td in page.find_all("td", cls=reader_cls)
                      for li in td.find_all("li", cls="rec"))

    assert offsets("ru") == [0, 1, 3, 4, 6, 7]
    assert offsets("rc") == [0, 1], "read_committed: no aborted records, nothing at or above the LSO"
    rc_text = " ".join(td.text() for td in page.find_all("td", cls="rc"))
    assert "aborted-3" not in rc_text and "open-6" not in rc_text and "committed-7" not in rc_text
    assert "committed-0" in rc_text
    fates = {n.attrs["data-base-offset"]: n.attrs["data-rc"] for n in page.find_all("tr", cls="batch")}
    assert fates == {"0": "delivered", "3": "aborted", "6": "beyond-lso", "7": "beyond-lso"}

    # The LSO line: at 6, between the ABORT marker and the open batch, named
    # by the open transaction.
    open_batch = page.find_all("tr", cls="batch", data_base_offset="6")[0]
    producer_id = open_batch.attrs["data-producer-id"]
    [line] = page.find_all("tr", cls="lso")
    assert line.attrs["data-lso"] == "6"
    assert line.attrs["data-held-by"] == producer_id
    assert (f"open transaction of producer {producer_id} ({open_id}) since offset 6 "
            "holds read_committed readers here") in line.text()
    rows = [n for n in page.find_all("tr") if n.parent.tag == "tbody"
            and ("lso" in n.attrs.get("class", "").split() or n.attrs.get("data-offset") == "5"
                 or n is open_batch)]
    assert rows == [aborts[0], line, open_batch], "the LSO line lies between offsets 5 and 6"
    [summary] = page.find_all("dl", data_lso=None)
    assert (summary.attrs["data-lso"], summary.attrs["data-high-watermark"]) == ("6", "9")
    [open_row] = page.find_all("tr", cls="open-txn")
    assert open_row.attrs["data-start-offset"] == "6" and open_row.attrs["data-status"] == "open"
    screenshot(url, tmp_path, "console-partition.png")

    # A read_committed consumer group that has read all it may: stuck at the LSO.
    group = unique_topic("console-group")
    c = consumer(b, **{"group.id": group, "isolation.level": "read_committed",
                       "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        wait_until(lambda: (c.consume(num_messages=100, timeout=0.2) is not None
                            and c.position([TopicPartition(topic, 0)])[0].offset == 6),
                   30, what="the read_committed consumer reaches the LSO")
        c.commit(offsets=[TopicPartition(topic, 0, 6)], asynchronous=False)
    finally:
        c.close()

    # The cluster page lists the open transaction, on its partition.
    cluster = dom(f"{b.console}/", tmp_path)
    [txn] = cluster.find_all("tr", cls="txn", data_transactional_id=open_id)
    assert txn.attrs["data-state"] == "Ongoing"
    assert txn.attrs["data-producer-id"] == producer_id
    assert f"{topic}-0" in txn.text()
    [on_partition] = cluster.find_all("tr", cls="open-txn", data_topic=topic)
    assert on_partition.attrs["data-start-offset"] == "6"
    [row] = cluster.find_all("tr", cls="partition", data_topic=topic)
    assert "1 open" in row.text()
    # The group: 3 behind the high watermark, none of it readable yet.
    [lag] = cluster.find_all("tr", cls="group-offset", data_group_id=group)
    assert lag.attrs["data-lag"] == "3" and lag.attrs["data-readable"] == "0"
    [waiting] = lag.find_all("span", data_waiting_for=producer_id)
    assert f"open transaction of producer {producer_id} ({open_id}) since offset 6" in waiting.text()
    screenshot(f"{b.console}/", tmp_path, "console-cluster.png")

    # A page of the log from offset 3: the batch of 0-1 is not on it.
    page = dom(f"{url}?from=3", tmp_path)
    assert [n.attrs["data-base-offset"] for n in page.find_all("tr", cls="batch")] == ["3", "6", "7"]

    # Unknown topics and partitions, bad offsets; the headers of a page.
    assert http_get(f"{b.console}/topics/no-such-topic/0")[0] == 404
    assert http_get(f"{b.console}/topics/{topic}/1")[0] == 404
    assert http_get(f"{url}?from=x")[0] == 400
    status, headers, body = http_get(url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src" not in headers["Content-Security-Policy"]
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    del holder


@pytest.mark.timeout(240)
def test_console_escapes_hostile_ids_and_records(console_broker, tmp_path):
    b = console_broker
    topic = create_topic(b, unique_topic("console-evil"), 1)
    holder = transaction(b, EVIL, topic, [(b"<img src=x onerror=alert(2)>", EVIL.encode())],
                         None, **OPEN_TIMEOUT)
    for url in (f"{b.console}/", f"{b.console}/topics/{topic}/0"):
        page = dom(url, tmp_path)
        # Nothing hostile became an element...
        assert not page.find_all("script"), url
        assert not page.find_all("img"), url
        # ...and it is all there as text.
        assert EVIL in page.text(), url
    cluster = dom(f"{b.console}/", tmp_path)
    [txn] = cluster.find_all("tr", cls="txn", data_transactional_id=EVIL)
    assert txn.attrs["data-state"] == "Ongoing"
    part = dom(f"{b.console}/topics/{topic}/0", tmp_path)
    [rec] = part.find_all("li", cls="rec", data_offset="0")
    assert "<img src=x onerror=alert(2)>" in rec.text() and EVIL in rec.text()
    [line] = part.find_all("tr", cls="lso")
    assert f"({EVIL}) since offset 0" in line.text()
    # The raw HTML: escaped, never a tag.
    body = http_get(f"{b.console}/topics/{topic}/0")[2]
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    del holder


def users_add(binary, data_dir, name, password):
    data_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [str(binary), "users", "add", name, "--mechanism", "SCRAM-SHA-256", "--password-stdin",
         "--data-dir", str(data_dir)],
        input=password + "\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"users add failed: {out.stdout}{out.stderr}"


@pytest.mark.timeout(240)
def test_console_sees_everything_behind_sasl_and_acls(start_broker, broker_binary, tmp_path):
    """Only a SASL listener, the authorizer on and no ACL (nobody but the
    super user may do anything): the console, which has no credentials,
    still shows the topic, its records and its open transaction."""
    sasl_port, console_port = free_ports(2)
    users_add(broker_binary, tmp_path / "secure-data", "admin", "admin-secret")
    b = start_broker(name="secure", listen_port=sasl_port, sets=[
        *TXN_BROKER_SETS,
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=false",
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        f"doze.console.listen=127.0.0.1:{console_port}",
    ])
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "admin", "sasl.password": "admin-secret"}
    topic = unique_topic("console-sasl")
    admin = AdminClient({"bootstrap.servers": b.bootstrap, **sasl})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                        request_timeout=30)[topic].result(timeout=30)
    holder = transaction(b, unique_topic("console-sasl-open"), topic, [b"secret-0"], None,
                         **sasl, **OPEN_TIMEOUT)
    console = f"http://127.0.0.1:{console_port}"
    cluster = dom(f"{console}/", tmp_path)
    [row] = cluster.find_all("tr", cls="partition", data_topic=topic)
    assert "1 open" in row.text()
    [open_row] = cluster.find_all("tr", cls="open-txn", data_topic=topic)
    assert open_row.attrs["data-status"] == "open"
    listeners = cluster.find_all("table", cls="listeners")[0].text()
    assert "SASL_PLAINTEXT" in listeners and f"127.0.0.1:{sasl_port}" in listeners
    part = dom(f"{console}/topics/{topic}/0", tmp_path)
    [rec] = part.find_all("li", cls="rec", data_offset="0")
    assert "secret-0" in rec.text()
    [line] = part.find_all("tr", cls="lso")
    assert line.attrs["data-lso"] == "0" and line.attrs["data-held-by"]
    del holder


@pytest.mark.timeout(240)
def test_an_overdue_transaction_comes_with_a_command_that_aborts_it(start_broker, broker_binary,
                                                                    tmp_path):
    """A transaction open longer than its timeout (2 s) that its coordinator
    has not aborted yet (it looks every 10 min here): the cluster page marks
    it overdue with the abort command, and that command, run as shown, ends
    it: the LSO reaches the high watermark."""
    port = free_port()
    b = start_broker(sets=[
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=600000",
        f"doze.console.listen=127.0.0.1:{port}",
    ])
    topic = create_topic(b, unique_topic("console-late"), 1)
    # librdkafka wants socket.timeout.ms <= transaction.timeout.ms + 100.
    holder = transaction(b, unique_topic("console-late"), topic, [b"late-0"], None,
                         **{"transaction.timeout.ms": 2000, "socket.timeout.ms": 2000})
    time.sleep(2.5)
    cluster = dom(f"http://127.0.0.1:{port}/", tmp_path)
    [row] = cluster.find_all("tr", cls="open-txn", data_topic=topic)
    assert row.attrs["data-status"] == "overdue", row.text()
    [shown] = row.find_all("pre", data_abort_command=None)
    command = shown.text().split()
    assert command[:2] == ["doze-kafka", "transactions"], command
    assert command[-6:] == ["--topic", topic, "--partition", "0", "--start-offset", "0"]
    out = subprocess.run([str(broker_binary), *command[1:]], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    assert end_offsets(b, topic, [0], "read_committed") == {0: 2}
    del holder


@pytest.mark.timeout(240)
def test_console_pages_through_a_large_log(console_broker):
    """3,000 records of 100 bytes (300 KB, well over a page's 64 KiB window):
    following the pages' `next` links from the log start shows every record
    once, in order, no page with more than 500, and each later page links
    back."""
    b = console_broker
    topic = create_topic(b, unique_topic("console-big"), 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 16384})
    for i in range(3000):
        p.produce(topic, value=b"%05d" % i + b"." * 95, partition=0)
    assert p.flush(60) == 0
    url, seen, pages = f"{b.console}/topics/{topic}/0", [], 0
    while url:
        status, _, body = http_get(url)
        assert status == 200, body
        page = parse(body)
        offsets = [int(li.attrs["data-offset"])
                   for td in page.find_all("td", cls="ru") for li in td.find_all("li", cls="rec")]
        assert 0 < len(offsets) <= 500, (url, len(offsets))
        seen += offsets
        pages += 1
        if pages > 1:
            assert page.find_all("a", rel="prev"), url
        nexts = page.find_all("a", rel="next")
        url = f"{b.console}{nexts[0].attrs['href']}" if nexts else None
        assert pages < 50, "the pages do not end"
    assert seen == list(range(3000)), f"{len(seen)} records over {pages} pages"
    assert pages >= 5
