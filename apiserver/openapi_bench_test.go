package apiserver

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// openAPIRequests are the documents clients fetch: v2 as kubectl's validation and
// explain --output=plaintext-openapiv2 ask for it (protobuf) and as JSON, the v3 root
// (whose hashes encode every group version's document) and one v3 group-version
// document, as kubectl explain and apply ask for them.
var openAPIRequests = []struct {
	name, path, accept string
	handler            func(d *openAPIDocs) http.Handler
}{
	{"v2-protobuf", "/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf", func(d *openAPIDocs) http.Handler { return d.v2Serve }},
	{"v2-json", "/openapi/v2", "application/json", func(d *openAPIDocs) http.Handler { return d.v2Serve }},
	{"v3-root", "/openapi/v3", "application/json", func(d *openAPIDocs) http.Handler { return d.v3Root }},
	{"v3-apps-v1", "/openapi/v3/apis/apps/v1", "application/json", func(d *openAPIDocs) http.Handler { return d.v3Serve }},
}

func serveOpenAPI(b *testing.B, d *openAPIDocs, i int) *httptest.ResponseRecorder {
	b.Helper()
	if err := d.sync(); err != nil {
		b.Fatal(err)
	}
	r := openAPIRequests[i]
	req := httptest.NewRequest(http.MethodGet, r.path, nil)
	req.Header.Set("Accept", r.accept)
	rec := httptest.NewRecorder()
	r.handler(d).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
		b.Fatalf("GET %s: %d, %d bytes", r.path, rec.Code, rec.Body.Len())
	}
	return rec
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkOpenAPIBuild measures building the documents of the built-in registry (an
// iteration) and the first answer of each, which encodes it; and, once, the heap the
// server keeps for the built documents and for them encoded.
func BenchmarkOpenAPIBuild(b *testing.B) {
	reg, err := newBuiltinRegistry(builtinDeps{eventTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	var firstAnswers time.Duration
	for b.Loop() {
		d := newOpenAPIDocs(reg)
		if err := d.sync(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		start := time.Now()
		for i := range openAPIRequests {
			serveOpenAPI(b, d, i)
		}
		firstAnswers += time.Since(start)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(firstAnswers.Microseconds())/1000/float64(b.N), "first-answers-ms/op")

	base := heapAlloc()
	d := newOpenAPIDocs(reg)
	if err := d.sync(); err != nil {
		b.Fatal(err)
	}
	built := heapAlloc()
	for i := range openAPIRequests {
		serveOpenAPI(b, d, i)
	}
	encoded := heapAlloc()
	runtime.KeepAlive(d)
	b.ReportMetric(float64(built-base)/(1<<20), "built-heap-MiB")
	b.ReportMetric(float64(encoded-base)/(1<<20), "encoded-heap-MiB")
}

// BenchmarkOpenAPIServe measures answering each document once it is built and encoded.
func BenchmarkOpenAPIServe(b *testing.B) {
	reg, err := newBuiltinRegistry(builtinDeps{eventTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	d := newOpenAPIDocs(reg)
	for i, r := range openAPIRequests {
		b.Run(r.name, func(b *testing.B) {
			size := serveOpenAPI(b, d, i).Body.Len()
			for b.Loop() {
				serveOpenAPI(b, d, i)
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
