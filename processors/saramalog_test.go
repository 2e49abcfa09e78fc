package processors_test

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// saramaLog keeps sarama's last debug lines (subscriptions added and abandoned, fetch errors), so
// that a test which sees a partition stall can say what sarama's consumer did meanwhile. sarama
// logs nothing unless given a logger; its lines are few except around rebalances.
var saramaLog = newLogRing(2000)

func init() { sarama.Logger = saramaLog }

// logRing is a sarama.StdLogger keeping the last n lines.
type logRing struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newLogRing(n int) *logRing { return &logRing{lines: make([]string, n)} }

func (r *logRing) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[r.next] = time.Now().UTC().Format("15:04:05.000 ") + strings.TrimRight(s, "\n")
	r.next = (r.next + 1) % len(r.lines)
	r.full = r.full || r.next == 0
}

func (r *logRing) Print(v ...any)                 { r.add(fmt.Sprint(v...)) }
func (r *logRing) Printf(format string, v ...any) { r.add(fmt.Sprintf(format, v...)) }
func (r *logRing) Println(v ...any)               { r.add(fmt.Sprintln(v...)) }

// tail returns the last lines that contain any of the words (all lines when none given).
func (r *logRing) tail(n int, words ...string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	if r.full {
		all = append(all, r.lines[r.next:]...)
	}
	all = append(all, r.lines[:r.next]...)
	var out []string
	for _, l := range all {
		if len(words) == 0 || containsAny(l, words) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
