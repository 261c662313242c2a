package dozego

// The broker under test: the doze-kafka release binary on a free loopback port
// with a fresh data directory (t.TempDir()), as tests/conftest.py does for the
// Python wire tests. A Broker can be SIGKILLed and restarted on the same port
// and data directory, and is stopped (SIGTERM, exit code checked) when the test
// ends. Every generation's output goes to its own log file; a failed test
// prints the tail of each (and of every client log registered with AddLog).
//
// DOZE_KAFKA_BIN overrides the binary (default: ../../target/release/doze-kafka
// from this directory). DOZE_GO_KEEP_LOGS=DIR copies every log of each test
// (broker and clients) into DIR/<test name>/ before the temp dirs are removed.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	readyLine      = "doze-kafka listening on"
	readyTimeout   = 30 * time.Second
	stopTimeout    = 30 * time.Second
	logTailLines   = 80
	defaultBinPath = "../../target/release/doze-kafka"
)

// txnBrokerSets are the settings every transaction test uses (as
// tests/txnutil.py): timed-out transactions are looked for every 500 ms and a
// group's first rebalance is not delayed.
var txnBrokerSets = []string{
	"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
	"group.initial.rebalance.delay.ms=0",
}

type Broker struct {
	t       testing.TB
	bin     string
	dataDir string
	logDir  string
	port    int
	sets    []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	exitErr  error
	gen      int
	logPaths []string // broker logs, then client logs (AddLog)
}

func brokerBinary(t testing.TB) string {
	bin := os.Getenv("DOZE_KAFKA_BIN")
	if bin == "" {
		bin = defaultBinPath
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatalf("broker binary path %q: %v", bin, err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		t.Fatalf("doze-kafka binary not found at %s (build it with `make build-release`, or set DOZE_KAFKA_BIN): %v", abs, err)
	}
	return abs
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartBroker starts a broker with the given `--set key=value` settings and
// registers its stop (and, on failure, the log dump) with t.Cleanup.
func StartBroker(t *testing.T, sets ...string) *Broker {
	t.Helper()
	b := &Broker{
		t:       t,
		bin:     brokerBinary(t),
		dataDir: filepath.Join(t.TempDir(), "data"),
		logDir:  t.TempDir(),
		port:    freePort(t),
		sets:    sets,
	}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before the first start, so it runs after every cleanup the
	// test registers later (clients close first, then the broker stops).
	t.Cleanup(b.cleanup)
	if err := b.start(); err != nil {
		t.Fatalf("starting doze-kafka: %v", err)
	}
	return b
}

func (b *Broker) Addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

func (b *Broker) args() []string {
	// No console: brokers run side by side, and all would want port 8092.
	a := []string{"--listen", b.Addr(), "--data-dir", b.dataDir, "--set", "doze.console.listen=none"}
	for _, s := range b.sets {
		a = append(a, "--set", s)
	}
	return a
}

// LogPath returns a new log file path in the test's log directory and
// registers it to be shown if the test fails (for client logs).
func (b *Broker) AddLog(name string) string {
	p := filepath.Join(b.logDir, name)
	b.mu.Lock()
	b.logPaths = append(b.logPaths, p)
	b.mu.Unlock()
	return p
}

func (b *Broker) start() error {
	var lastErr error
	// A restart may find the port still held for a moment: retry a few times.
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		lastErr = b.spawn()
		if lastErr == nil {
			return nil
		}
		if b.gen == 1 {
			break
		}
	}
	return lastErr
}

func (b *Broker) spawn() error {
	b.mu.Lock()
	b.gen++
	logPath := filepath.Join(b.logDir, fmt.Sprintf("broker-%d-gen%d.log", b.port, b.gen))
	b.logPaths = append(b.logPaths, logPath)
	b.mu.Unlock()

	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.bin, b.args()...)
	cmd.Env = append(os.Environ(), "RUST_BACKTRACE=1")
	cmd.Stderr = logf
	// If the test binary dies, the broker goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("exec %s: %w", b.bin, err)
	}
	ready := make(chan struct{})
	pumpDone := make(chan struct{})
	go func() {
		// Copy stdout into the log, watch for the ready line, keep draining.
		defer close(pumpDone)
		r := bufio.NewReader(stdout)
		signalled := false
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				logf.Write(line)
				if !signalled && bytes.Contains(line, []byte(readyLine)) {
					signalled = true
					close(ready)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan struct{})
	var waitErr error // read only after exited is closed
	go func() {
		<-pumpDone // Wait must not run before the pipe is drained
		waitErr = cmd.Wait()
		logf.Close()
		b.mu.Lock()
		b.exitErr = waitErr
		b.mu.Unlock()
		close(exited)
	}()

	select {
	case <-ready:
		b.mu.Lock()
		b.cmd, b.exited = cmd, exited
		b.mu.Unlock()
		return nil
	case <-exited:
		return fmt.Errorf("doze-kafka exited (%v) before listening (args %v):\n%s", waitErr, b.args(), b.logTail())
	case <-time.After(readyTimeout):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("doze-kafka did not print %q within %v (args %v):\n%s", readyLine, readyTimeout, b.args(), b.logTail())
	}
}

func (b *Broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Kill9 SIGKILLs the broker: nothing that is not already on disk survives.
func (b *Broker) Kill9() {
	b.t.Helper()
	if !b.running() {
		b.t.Fatalf("Kill9: broker is not running:\n%s", b.logTail())
	}
	b.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-b.exited:
	case <-time.After(stopTimeout):
		b.t.Fatalf("doze-kafka did not exit %v after SIGKILL", stopTimeout)
	}
}

// Restart SIGKILLs the broker (if running) and starts it again on the same
// port and data directory.
func (b *Broker) Restart() {
	b.t.Helper()
	if b.running() {
		b.Kill9()
	}
	if err := b.start(); err != nil {
		b.t.Fatalf("restarting doze-kafka: %v", err)
	}
}

// Stop sends SIGTERM and waits (bounded); the broker must exit 0.
func (b *Broker) Stop() error {
	if !b.running() {
		return nil
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(stopTimeout):
		b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("doze-kafka ignored SIGTERM for %v", stopTimeout)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exitErr != nil {
		return fmt.Errorf("doze-kafka exited with %v on SIGTERM", b.exitErr)
	}
	return nil
}

func (b *Broker) cleanup() {
	if err := b.Stop(); err != nil {
		b.t.Errorf("%v", err)
	}
	if b.t.Failed() {
		b.t.Logf("logs of the failed test (%s):\n%s", b.logDir, b.logTail())
	}
	if keep := os.Getenv("DOZE_GO_KEEP_LOGS"); keep != "" {
		dst := filepath.Join(keep, strings.ReplaceAll(b.t.Name(), "/", "_"))
		if err := copyDir(b.logDir, dst); err != nil {
			b.t.Logf("copying logs to %s: %v", dst, err)
		} else {
			b.t.Logf("logs kept in %s", dst)
		}
	}
}

func (b *Broker) logTail() string {
	b.mu.Lock()
	paths := append([]string(nil), b.logPaths...)
	b.mu.Unlock()
	var sb strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&sb, "--- %s (last %d lines) ---\n%s\n", filepath.Base(p), len(lines), strings.Join(lines, "\n"))
	}
	return sb.String()
}

func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err == nil {
			_, err = io.Copy(out, in)
			out.Close()
		}
		in.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
