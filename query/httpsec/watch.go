package httpsec

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// fileStamp identifies the versions of a set of files (size and modification time of each), so
// that a change is seen without reading them.
type fileStamp string

func stampFiles(paths []string) fileStamp {
	var b strings.Builder
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s %d %d;", p, st.Size(), st.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s missing;", p)
		}
	}
	return fileStamp(b.String())
}

// Reloadable is a set of files read once and read again when they change: an Authenticator or
// a CertReloader.
type Reloadable interface {
	Files() []string
	Reload() error
	stamp() fileStamp
}

func (a *Authenticator) stamp() fileStamp {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.watched
}

func (c *CertReloader) stamp() fileStamp {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.watched
}

// Watch reloads r whenever its files change, checking every interval, until ctx ends. A reload
// that fails is logged once per version of the files, and the credentials or certificate in use
// stay.
func Watch(ctx context.Context, r Reloadable, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var failed fileStamp
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := stampFiles(r.Files())
		if now == r.stamp() || now == failed {
			continue
		}
		if err := r.Reload(); err != nil {
			failed = now
			log.Error("changed files not loaded; the ones loaded before stay in use", "files", r.Files(), "err", err)
			continue
		}
		failed = ""
		log.Info("reloaded", "files", r.Files())
	}
}
