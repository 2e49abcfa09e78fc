package httpapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// webFiles is the dashboard: plain HTML, CSS and JavaScript modules with no build step, and uPlot
// vendored from npm (web/vendor/update-uplot.sh), embedded so that `abacus serve` and `abacus demo`
// need no npm step, no CDN and no files beside the binary.
//
//go:embed web
var webFiles embed.FS

// dashboardCSP allows only the page's own files and API. Inline styles stay allowed because uPlot
// sizes its elements through style attributes; scripts may only come from the embedded files.
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// webTypes fixes the Content-Type of the page's own kinds of file rather than taking it from the
// host's mime.types (which mime.TypeByExtension reads, and which differs between hosts: .js may be
// application/javascript there, or missing). A browser refuses a module script, and with nosniff
// any script or stylesheet, that is not served under its type.
var webTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

type webAsset struct {
	body  []byte
	etag  string
	ctype string
}

// webAssets reads the embedded files once. Embedded files have no modification time, so each gets
// a content hash as its ETag: browsers revalidate cheaply and never keep a page older than the binary.
var webAssets = sync.OnceValue(func() map[string]webAsset {
	assets := map[string]webAsset{}
	err := fs.WalkDir(webFiles, "web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".sh") || strings.HasSuffix(p, ".md") { // notes for developers
			return err
		}
		body, err := webFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := webTypes[path.Ext(p)]
		if ctype == "" {
			ctype = mime.TypeByExtension(path.Ext(p))
		}
		if ctype == "" {
			ctype = "text/plain; charset=utf-8" // LICENSE, VERSION
		}
		assets[strings.TrimPrefix(p, "web")] = webAsset{body: body, ctype: ctype,
			etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("httpapi: embedded dashboard unreadable: " + err.Error()) // cannot happen with a built binary
	}
	return assets
})

// dashboard is the dashboard page (topology, aggregate set, aggregate, entities and time range to
// choose; a uPlot time-series chart with live refresh; the latest values) and its assets. The page
// calls the HTTP API with relative URLs, so it is served only at "/" of the mux that serves the
// API: HandlerWithDashboard is the one way to get it.
func dashboard() http.Handler {
	assets := webAssets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := path.Clean("/" + r.URL.Path)
		if p == "/" {
			p = "/index.html"
		}
		a, ok := assets[p]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("ETag", a.etag)
		// Every load revalidates every file (304 when unchanged): the modules import each other by
		// name, and a browser that kept some of them from an older binary would run a mix.
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(a.ctype, "text/html") {
			h.Set("Content-Security-Policy", dashboardCSP)
		}
		// ServeContent answers If-None-Match and ranges; the zero time sends no Last-Modified.
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(a.body))
	})
}

// HandlerWithDashboard returns Handler's routes with the dashboard page mounted at "/" (the page
// calls the API with relative URLs); Handler serves the API alone.
func (s *Server) HandlerWithDashboard() *http.ServeMux {
	mux := s.Handler()
	mux.Handle("GET /", dashboard())
	return mux
}
