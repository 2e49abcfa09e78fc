package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// role is one abacus role (processor, aggregates-sink or facts-sink) run as its own process of
// the real binary, restarted whenever it exits unless the suite stopped it: a process the suite
// kills is restarted by the suite after a pause, one that exits by itself (an unplanned exit) is
// restarted by the supervisor after two seconds, as an orchestrator would.
type role struct {
	name    string // the -roles value
	bin     string
	config  string
	logPath string
	logf    func(format string, args ...any)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has exited
	expected bool          // the current process's exit is the suite's doing
	stopped  bool          // no more restarts
	starts   int
	kills    int
	exits    []string // unplanned exits: when, status and the last log line
}

func newRole(name, bin, config, logPath string, logf func(string, ...any)) *role {
	return &role{name: name, bin: bin, config: config, logPath: logPath, logf: logf}
}

// start launches the process unless one runs or the role is stopped. Called with mu held.
func (r *role) startLocked() error {
	if r.stopped || r.cmd != nil {
		return nil
	}
	lf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "\n===== chaos suite: start %s at %s =====\n", r.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.bin, "run", "-config", r.config, "-roles", r.name)
	// Ops endpoints on a port the system picks (each start prints it in the role's log): the
	// defaults (127.0.0.1:9361..9363) belong to whatever else runs abacus on this machine, and
	// a busy port would stop the role at start.
	cmd.Env = append(os.Environ(), "ABACUS_OPS_LISTEN=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = lf, lf
	// The roles die with the suite, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	r.starts++
	r.cmd, r.expected = cmd, false
	done := make(chan struct{})
	r.done = done
	go func() {
		err := cmd.Wait()
		lf.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		unplanned := !r.expected
		r.cmd = nil
		close(done)
		if unplanned {
			note := fmt.Sprintf("%s: %v; %s", time.Now().UTC().Format(time.TimeOnly), err, lastLine(r.logPath))
			r.exits = append(r.exits, note)
			r.logf("%s exited by itself (%s); restarting in 2 s", r.name, note)
			time.AfterFunc(2*time.Second, func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				if err := r.startLocked(); err != nil {
					r.logf("restart %s: %v", r.name, err)
				}
			})
		}
	}()
	return nil
}

// Start launches the role's process.
func (r *role) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startLocked()
}

// Kill SIGKILLs the running process and waits for it; it reports the pid, or 0 if none ran.
func (r *role) Kill() int {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	if cmd == nil {
		r.mu.Unlock()
		return 0
	}
	r.expected = true
	_ = cmd.Process.Signal(syscall.SIGKILL)
	r.kills++
	r.mu.Unlock()
	<-done
	return cmd.Process.Pid
}

// Stop ends the role for good: SIGTERM (the process lands and commits what it holds), SIGKILL
// after timeout.
func (r *role) Stop(timeout time.Duration) {
	r.mu.Lock()
	r.stopped = true
	cmd, done := r.cmd, r.done
	if cmd == nil {
		r.mu.Unlock()
		return
	}
	r.expected = true
	_ = cmd.Process.Signal(syscall.SIGTERM)
	r.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		r.logf("%s did not stop within %v of SIGTERM: SIGKILL", r.name, timeout)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Running reports whether a process of the role runs.
func (r *role) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}

// counts returns kills, starts and unplanned exits.
func (r *role) counts() (kills, starts int, exits []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kills, r.starts, append([]string(nil), r.exits...)
}

// Log messages of a role that rode out an outage without exiting, counted in the summary.
const (
	msgGroupRunAgain = "the processor group stopped on a broker outage" // processors.Processor.Run
	msgStartWaited   = "; waiting for it"                               // app's waiter, at start
)

// logLines counts the lines of the role's log (every run of it) that contain msg.
func (r *role) logLines(msg string) int {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(msg))
}

// lastLine returns the last non-empty line of a log file, shortened.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
