package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
)

// TestDemo starts `abacus demo` and waits for its API to serve non-empty aggregates, with the
// in-process broker and embedded store and, when they run, with the real Kafka and HBase.
func TestDemo(t *testing.T) {
	modes := []string{"embedded"}
	if !testing.Short() {
		modes = append(modes, "real-servers")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			args := []string{"demo", "-listen", "127.0.0.1:0", "-for", "2m"}
			if mode == "real-servers" {
				args = append(args, "-kafka", strings.Join(testenv.Kafka(t), ","), "-hbase", testenv.HBaseZooKeeper(t))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pr, pw := io.Pipe()
			done := make(chan int, 1)
			go func() {
				done <- program.Run(ctx, args, pw, io.Discard)
				pw.Close()
			}()
			urlc := make(chan string, 1)
			go func() {
				re := regexp.MustCompile(`dashboard: (http://\S+)`)
				sc := bufio.NewScanner(pr)
				for sc.Scan() {
					if m := re.FindStringSubmatch(sc.Text()); m != nil {
						urlc <- m[1]
					}
				}
			}()
			var base string
			select {
			case base = <-urlc:
			case code := <-done:
				t.Fatalf("demo exited with %d before serving", code)
			case <-time.After(2 * time.Minute):
				t.Fatal("demo did not print its URL")
			}
			resp, err := http.Get(base)
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(page), "uplot") {
				t.Fatalf("dashboard at %s: %d %s %.200s", base, resp.StatusCode, resp.Header.Get("Content-Type"), page)
			}
			deadline := time.Now().Add(time.Minute)
			sawLive := false
			for {
				n, live, err := countWindows(base + "api/v1/windows?set=minute&entity=device-000,device-001,device-002&limit=5")
				sawLive = sawLive || live > 0
				if err == nil && n > 0 && sawLive {
					t.Logf("%s: %d windows with counts after %s", mode, n, time.Minute-time.Until(deadline))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no aggregates (or no live window) within a minute: %d windows, live seen %v, last error %v", n, sawLive, err)
				}
				time.Sleep(time.Second)
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("demo exited with %d after Ctrl-C", code)
			}
		})
	}
}

// countWindows returns how many windows have a positive count, and how many of them are live
// (read from the processor's open windows).
func countWindows(url string) (n, live int, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Entities map[string][]struct {
			Live   bool           `json:"live"`
			Values map[string]any `json:"values"`
		} `json:"entities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, 0, err
	}
	for _, ws := range body.Entities {
		for _, w := range ws {
			if c, ok := w.Values["count"].(float64); ok && c > 0 {
				n++
				if w.Live {
					live++
				}
			}
		}
	}
	return n, live, nil
}
