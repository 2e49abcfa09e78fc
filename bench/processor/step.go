package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// step runs one system as a process of its own and watches it until it has done its work, or
// fails with the reason. A step never waits on a single condition with only a long timeout (the
// old harness hang): every 100 ms it checks that the process is alive and that something moved
// (records processed, offsets committed, finals written), and fails when the process exits before
// it was asked to, when nothing has moved for the stall limit, or at the step timeout.
//
// The process talks through stdio: it prints "progress <records>" lines as it processes input and
// stops cleanly (committing) when its stdin reaches EOF. Its other output goes to the step's log
// file, whose tail is quoted when the step fails.
type step struct {
	name   string
	cmd    *exec.Cmd
	group  string // consumer group whose commits on the input show what is done
	in     *input
	output string // topic of the system's finals; "" when it writes none
	decode func(*kgo.Record) (final, bool, error)
	expect *expectation // finals a correct run writes; nil: not checked
	// lateTopic is abacus's late topic: read back once the process has exited and checked
	// against expect's late events; "" for a system without one.
	lateTopic string
	// minProgress is the processed count that ends the step with all input committed
	// (default: every record of the input; restarts wait for the probes only).
	minProgress int64
	logPath     string
	stall       time.Duration
	timeout     time.Duration
	// stopGrace is how long a process that is done may take to stop once asked (default 90 s:
	// Kafka Streams' close waits up to 60 s for its threads); a failed step gives it less.
	stopGrace time.Duration
	// committed reports the records the group has committed on the input (default: asks the
	// broker; tests replace it).
	committed func(context.Context) (int64, error)
}

// result is what a step measured. Durations in the table count from first: the moment the
// process reported its first processed record, so JVM start, group joins and restores are
// reported apart (startup) and do not dilute the throughput.
type result struct {
	system    string
	records   int64 // input records the step had to process
	spawn     time.Time
	first     time.Time // first record processed
	ready     time.Time // minProgress reached
	committed time.Time // every input record committed by the group
	lastFinal time.Time // broker append time of the newest final
	cpu       time.Duration
	rss       int64 // peak resident set, bytes
	out       outputStats
	late      *lateStats // the late topic's records, when the step checked them
	lines     []string   // the process's stdout lines other than progress
	err       error
}

// startup is how long the process took to process its first record.
func (r *result) startup() time.Duration { return r.first.Sub(r.spawn) }

// throughput is input records per second, from the first record processed to the last committed.
func (r *result) throughput() float64 {
	d := r.committed.Sub(r.first).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(r.records) / d
}

// cpuPerMillion is the CPU seconds the work took per million input records.
func (r *result) cpuPerMillion() float64 {
	return r.cpu.Seconds() / (float64(r.records) / 1e6)
}

// run runs the step to its end. The returned result carries err when the step failed; the
// process is stopped either way.
func (s *step) run(ctx context.Context, adm *admin, log *slog.Logger) *result {
	res := &result{system: s.name, records: s.in.total}
	res.err = s.runInner(ctx, adm, log, res)
	if res.err != nil {
		res.err = fmt.Errorf("%s: %w%s", s.name, res.err, logTail(s.logPath, 25))
	}
	return res
}

// runInner starts the step's process and watches it until it is done, then stops it and checks
// what it wrote; every failure path stops the process too, with less grace.
func (s *step) runInner(ctx context.Context, adm *admin, log *slog.Logger, res *result) error {
	s.ensureDefaults(adm)
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p, err := s.prepare(logf)
	if err != nil {
		return err
	}

	// The finals reader starts before the process, so it sees every final from the first.
	var out *outputReader
	rctx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	if s.output != "" {
		if out, err = newOutputReader(adm.brokers, s.output, s.decode, s.expect); err != nil {
			return err
		}
		go out.run(rctx)
	}

	res.spawn = time.Now()
	if err := p.start(logf, res); err != nil {
		return err
	}
	log.Info("step started", "step", s.name, "pid", p.pid, "log", s.logPath)
	defer p.stop(min(10*time.Second, s.stopGrace)) // on every failure path

	if err := s.watch(ctx, p, out, res); err != nil {
		return err
	}
	if err := p.stop(s.stopGrace); err != nil {
		return err
	}
	p.linesMu.Lock()
	defer p.linesMu.Unlock()
	if out == nil {
		return nil
	}
	return s.checkOutput(ctx, adm, out, stopReader, res)
}

// ensureDefaults fills the fields a step may leave unset.
func (s *step) ensureDefaults(adm *admin) {
	if s.minProgress == 0 {
		s.minProgress = s.in.total
	}
	if s.stopGrace == 0 {
		s.stopGrace = 90 * time.Second
	}
	if s.committed == nil {
		s.committed = func(ctx context.Context) (int64, error) { return adm.committed(ctx, s.group, s.in.topic) }
	}
}

// stepProcess is a step's process while it runs: what its stdout says, and how to stop it.
type stepProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	pid    int
	// progress is the newest "progress <records>" count; chatter counts the other lines, signs
	// of life too (restores report their progress this way).
	progress, chatter atomic.Int64
	linesMu           sync.Mutex // guards the result's lines while stdout is read
	exited            chan error // the process's exit, once stdout is drained
	stopped           bool       // stop was called, or exited was read
}

// prepare writes the step's header to its log, sends the process's stderr there and opens its
// stdin and stdout.
func (s *step) prepare(logf *os.File) (*stepProcess, error) {
	fmt.Fprintf(logf, "# %s\n# %s\n", time.Now().Format(time.RFC3339), strings.Join(s.cmd.Args, " "))
	s.cmd.Stderr = logf
	p := &stepProcess{cmd: s.cmd, exited: make(chan error, 1)}
	var err error
	if p.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if p.stdout, err = s.cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts the process and reads its stdout: progress lines into p.progress, the others
// into res.lines and the log.
func (p *stepProcess) start(logf io.Writer, res *result) error {
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	p.pid = p.cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(p.stdout)
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "progress "); ok {
				if v, err := strconv.ParseInt(n, 10, 64); err == nil {
					p.progress.Store(v)
				}
				continue
			}
			p.chatter.Add(1)
			p.linesMu.Lock()
			res.lines = append(res.lines, line)
			p.linesMu.Unlock()
			fmt.Fprintln(logf, line)
		}
		// Wait only after stdout is drained (os/exec's rule for StdoutPipe).
		p.exited <- p.cmd.Wait()
	}()
	return nil
}

// stop closes the process's stdin (its cue to commit and exit) and waits up to grace, then
// kills it. A step that failed gives it little time: the reason is known, and a stalled
// process rarely reacts. Only the first call does anything.
func (p *stepProcess) stop(grace time.Duration) error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	p.stdin.Close()
	select {
	case err := <-p.exited:
		if err != nil {
			return fmt.Errorf("did not stop cleanly: %w", err)
		}
		return nil
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("did not stop within %v of its stdin closing: killed", grace)
	}
}

// progressWatch is what watch has seen of a step so far.
type progressWatch struct {
	committed      int64 // records the group has committed on the input, at the last poll
	lastCommitPoll time.Time
	lastMove       time.Time
	seen           struct{ progress, chatter, committed, finals int64 }
	cpuFirst       time.Duration // the process's CPU time when it processed its first record
}

// watch looks at the process every 100 ms until the step is done, or fails when the process
// exits before it was asked to, when nothing has moved for the stall limit, or at the timeout.
func (s *step) watch(ctx context.Context, p *stepProcess, out *outputReader, res *result) error {
	w := &progressWatch{lastMove: time.Now()}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case err := <-p.exited:
			p.stopped = true
			return fmt.Errorf("process exited before it was done (%v): %s", err, s.where(p.progress.Load(), w.committed, out))
		case <-tick.C:
		}
		if done, err := s.look(ctx, p, out, res, w); done || err != nil {
			return err
		}
	}
}

// look takes one look at a running step: it notes what moved and the moments of the result, and
// says whether the step is done (then it measures the CPU time and memory the work took).
func (s *step) look(ctx context.Context, p *stepProcess, out *outputReader, res *result, w *progressWatch) (bool, error) {
	now := time.Now()
	pr := p.progress.Load()
	if time.Since(w.lastCommitPoll) >= 250*time.Millisecond {
		w.lastCommitPoll = now
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := s.committed(cctx)
		cancel()
		if err != nil {
			return false, err
		}
		w.committed = c
	}
	var finals int64
	if out != nil {
		if err := out.failed(); err != nil {
			return false, err
		}
		finals = out.received()
	}
	ch := p.chatter.Load()
	if pr != w.seen.progress || ch != w.seen.chatter || w.committed != w.seen.committed || finals != w.seen.finals {
		w.seen.progress, w.seen.chatter, w.seen.committed, w.seen.finals = pr, ch, w.committed, finals
		w.lastMove = now
	}
	if res.first.IsZero() && pr > 0 {
		res.first = now
		var err error
		if w.cpuFirst, err = procCPU(p.pid); err != nil {
			return false, err
		}
	}
	if res.ready.IsZero() && pr >= s.minProgress {
		res.ready = now
	}
	if res.committed.IsZero() && w.committed >= s.in.total {
		res.committed = now
	}
	done := !res.ready.IsZero() && !res.committed.IsZero()
	if s.expect != nil && (out == nil || out.received() < int64(s.expect.finals)) {
		done = false
	}
	if done {
		cpu, err := procCPU(p.pid)
		if err != nil {
			return false, err
		}
		res.cpu = cpu - w.cpuFirst
		res.rss = procPeakRSS(p.pid)
		return true, nil
	}
	if now.Sub(w.lastMove) > s.stall {
		return false, fmt.Errorf("stalled: nothing moved for %v: %s", s.stall, s.where(pr, w.committed, out))
	}
	if now.Sub(res.spawn) > s.timeout {
		return false, fmt.Errorf("timed out after %v: %s", s.timeout, s.where(pr, w.committed, out))
	}
	return false, nil
}

// checkOutput reads what the system wrote to the end, once it has exited, and checks the finals
// and the late records against the expectation.
func (s *step) checkOutput(ctx context.Context, adm *admin, out *outputReader, stopReader func(), res *result) error {
	// Everything the system wrote is in the topic once it has exited: read to the end, so a
	// final written twice, or one too many, is seen.
	out.drain(2 * time.Second)
	stopReader()
	res.out = out.stats()
	res.lastFinal = res.out.lastAppend
	if s.expect == nil {
		return nil
	}
	if err := res.out.check(s.expect); err != nil {
		return err
	}
	if s.lateTopic == "" {
		return nil
	}
	lst, err := readLate(ctx, adm, s.lateTopic, s.in.topic, s.expect)
	res.late = &lst
	if err != nil {
		return err
	}
	return lst.check(s.expect)
}

// where says how far a step got, for failure messages.
func (s *step) where(progress, committed int64, out *outputReader) string {
	w := fmt.Sprintf("processed %d of %d records, committed %d", progress, s.minProgress, committed)
	if out != nil && s.expect != nil {
		w += fmt.Sprintf(", %d of %d finals", out.received(), s.expect.finals)
	}
	return w
}

// procCPU is the user+system CPU time of process pid, all threads (Linux: /proc/pid/stat, in
// clock ticks of 1/100 s).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("pid %d: short /proc stat line", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("pid %d: parse /proc stat: %w", pid, err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// procPeakRSS is the process's peak resident set size in bytes (VmHWM), 0 if unknown.
func procPeakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// logTail returns the last n lines of a step's log, for failure messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("\n  last lines of %s:\n    %s", path, strings.Join(lines, "\n    "))
}
