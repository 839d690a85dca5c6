// Package static embeds the console's stylesheet, scripts and vendored
// third-party assets and serves them under content-hashed URLs, so they can
// be cached for a year and still change with every release.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed css js vendor
var files embed.FS

// Prefix is the URL path under which assets are served.
const Prefix = "/static/"

// Assets knows every embedded file and its content-hashed URL.
type Assets struct {
	urls   map[string]string // "css/app.css" → "/static/css/app.3f2a9c1b.css"
	byPath map[string]string // "css/app.3f2a9c1b.css" → "css/app.css"
}

// New hashes every embedded file.
func New() *Assets {
	a := &Assets{urls: map[string]string{}, byPath: map[string]string{}}
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ext := path.Ext(name)
		hashed := strings.TrimSuffix(name, ext) + "." + hex.EncodeToString(sum[:6]) + ext
		a.urls[name] = Prefix + hashed
		a.byPath[hashed] = name
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("static: embedded files unreadable: %v", err))
	}
	return a
}

// URL returns the content-hashed URL of an embedded file such as
// "css/app.css". It panics for a file that is not embedded: that is a bug
// caught by any test that renders the page.
func (a *Assets) URL(name string) string {
	u, ok := a.urls[name]
	if !ok {
		panic("static: no embedded asset " + name)
	}
	return u
}

// Handler serves hashed asset paths (relative to Prefix) with a one-year
// immutable cache lifetime; anything else is 404.
func (a *Assets) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := a.byPath[strings.TrimPrefix(r.URL.Path, Prefix)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeFileFS(w, r, files, name)
	})
}
