package apiserver

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/miniplane/miniplane/configs"
)

// countingBody is a request body that has arrived whole, as an HTTP/2 body usually has: a
// read returns as much of it as the buffer takes. It counts the reads that return data,
// each of which an HTTP/2 server hands to the connection's serving goroutine.
type countingBody struct {
	data      []byte
	dataReads int
}

func (b *countingBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	b.dataReads++
	return n, nil
}

func (b *countingBody) Close() error { return nil }

// TestReadBodyInOneRead: a body whose length is declared is read in one read that returns
// data, not in io.ReadAll's growing steps; one of unknown length is read whole all the same;
// both are refused with 413 beyond the limit.
func TestReadBodyInOneRead(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name          string
		size          int
		declared      bool
		wantDataReads int // 0: any number
		wantTooLarge  bool
	}{
		{name: "declared small", size: 300, declared: true, wantDataReads: 1},
		{name: "declared pod-sized", size: 9000, declared: true, wantDataReads: 1},
		{name: "declared at the limit", size: limit, declared: true, wantDataReads: 1},
		{name: "declared empty", size: 0, declared: true},
		{name: "unknown length", size: 20000},
		{name: "unknown length over the limit", size: limit + 1, wantTooLarge: true},
		{name: "declared over the limit", size: limit + 1, declared: true, wantTooLarge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := bytes.Repeat([]byte("0123456789"), tc.size/10+1)[:tc.size]
			body := &countingBody{data: bytes.Clone(want)}
			r := httptest.NewRequest("POST", "/api/v1/namespaces/default/pods", nil)
			r.Body, r.ContentLength = body, -1
			if tc.declared {
				r.ContentLength = int64(tc.size)
			}
			c := &call{s: &Server{cfg: configs.APIServer{MaxRequestBodyBytes: limit}}, r: r}
			got, err := c.readBody()
			if tc.wantTooLarge {
				if !apierrors.IsRequestEntityTooLargeError(err) {
					t.Fatalf("err = %v, want 413", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, want the %d sent", len(got), len(want))
			}
			if tc.wantDataReads != 0 && body.dataReads != tc.wantDataReads {
				t.Errorf("%d reads returned data, want %d", body.dataReads, tc.wantDataReads)
			}
		})
	}
}
