package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/configs"
)

// The audit log: one JSON line per write request (create, update, patch, delete,
// deletecollection — and writes that were refused), an audit.k8s.io/v1 Event at stage
// ResponseComplete, so that one can see which identity changed what. Reads are not
// logged: they are most requests and change nothing. The level says how much an event
// holds: Metadata (who, what, when, how it was authorized, the answer's status), Request
// (also the request body) or RequestResponse (also the response body).

// auditBodyLimit bounds a body copied into an event: larger ones are left out.
const auditBodyLimit = 1 << 20

// auditLog writes audit events; nil logs nothing.
type auditLog struct {
	mu    sync.Mutex
	w     io.Writer
	close func() error
	level auditv1.Level
	clock clock.Clock
}

// newAuditLog opens path ("-" for standard output); "" means no audit log.
func newAuditLog(path, level string, clk clock.Clock) (*auditLog, error) {
	if path == "" {
		return nil, nil
	}
	l := &auditLog{w: os.Stdout, close: func() error { return nil }, level: auditv1.LevelMetadata, clock: clk}
	if path != "-" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		l.w, l.close = f, f.Close
	}
	switch level {
	case configs.AuditLevelRequest:
		l.level = auditv1.LevelRequest
	case configs.AuditLevelRequestResponse:
		l.level = auditv1.LevelRequestResponse
	}
	return l, nil
}

// auditRecorder keeps the response code, and the body when the event needs it.
type auditRecorder struct {
	http.ResponseWriter
	code    int
	keep    bool // keep every body; else only error bodies (a Status)
	body    bytes.Buffer
	tooLong bool
}

func (r *auditRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *auditRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if (r.keep || r.code >= 400) && !r.tooLong {
		if r.body.Len()+len(b) > auditBodyLimit {
			r.tooLong = true
			r.body.Reset()
		} else {
			r.body.Write(b)
		}
	}
	return r.ResponseWriter.Write(b)
}

func (r *auditRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *auditRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// teeBody copies what the handler reads of a request body, up to the limit.
type teeBody struct {
	io.ReadCloser
	buf     bytes.Buffer
	tooLong bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 && !t.tooLong {
		if t.buf.Len()+n > auditBodyLimit {
			t.tooLong = true
			t.buf.Reset()
		} else {
			t.buf.Write(p[:n])
		}
	}
	return n, err
}

// wrap logs every write that passes through next. It must run inside withRecovery,
// whose request state the handlers fill.
func (l *auditLog) wrap(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isMutating(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		received := l.clock.Now()
		var tee *teeBody
		if l.level != auditv1.LevelMetadata && r.Body != nil {
			tee = &teeBody{ReadCloser: r.Body}
			r.Body = tee
		}
		rec := &auditRecorder{ResponseWriter: w, keep: l.level == auditv1.LevelRequestResponse}
		next.ServeHTTP(rec, r)
		ev := l.event(r, stateFrom(r.Context()), rec, received)
		if tee != nil && !tee.tooLong {
			ev.RequestObject = jsonUnknown(tee.buf.Bytes())
		}
		if rec.keep && !rec.tooLong && rec.code < 400 {
			ev.ResponseObject = jsonUnknown(rec.body.Bytes())
		}
		l.write(ev)
	})
}

// event is the Metadata-level event of one request.
func (l *auditLog) event(r *http.Request, st *requestState, rec *auditRecorder, received time.Time) *auditv1.Event {
	code := rec.code
	if code == 0 {
		code = http.StatusOK
	}
	verb := st.verb
	if verb == "" {
		verb = nonResourceVerb(r.Method)
	}
	ev := &auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{Kind: "Event", APIVersion: auditv1.SchemeGroupVersion.String()},
		Level:                    l.level,
		AuditID:                  uuid.NewUUID(),
		Stage:                    auditv1.StageResponseComplete,
		RequestURI:               r.URL.RequestURI(),
		Verb:                     verb,
		UserAgent:                r.UserAgent(),
		SourceIPs:                sourceIPs(r),
		RequestReceivedTimestamp: metav1.NewMicroTime(received),
		StageTimestamp:           metav1.NewMicroTime(l.clock.Now()),
		ResponseStatus:           &metav1.Status{Code: int32(code)},
	}
	switch {
	case st.authenticated != nil:
		ev.User = userInfo(st.authenticated)
		imp := userInfo(st.user)
		ev.ImpersonatedUser = &imp
	case st.user != nil:
		ev.User = userInfo(st.user)
	}
	if i := st.info; i != nil {
		ev.ObjectRef = &auditv1.ObjectReference{Resource: i.res.name, Subresource: i.subresource, Namespace: i.namespace,
			Name: i.name, APIGroup: i.res.group, APIVersion: i.res.version}
	}
	if code >= 400 {
		var status metav1.Status
		if json.Unmarshal(rec.body.Bytes(), &status) == nil {
			ev.ResponseStatus.Status, ev.ResponseStatus.Reason, ev.ResponseStatus.Message = status.Status, status.Reason, status.Message
		}
	}
	if st.decision != "" {
		ev.Annotations = map[string]string{"authorization.k8s.io/decision": st.decision}
		if st.reason != "" {
			ev.Annotations["authorization.k8s.io/reason"] = st.reason
		}
	}
	if len(st.annotations) > 0 {
		if ev.Annotations == nil {
			ev.Annotations = make(map[string]string, len(st.annotations))
		}
		maps.Copy(ev.Annotations, st.annotations)
	}
	return ev
}

// stop closes the log once the server no longer serves.
func (l *auditLog) stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.close()
	l.w = io.Discard
}

func (l *auditLog) write(ev *auditv1.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	data = append(data, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(data)
}

// jsonUnknown is a body as an event holds it: JSON, or YAML or protobuf turned into JSON;
// nil for what is none of them.
func jsonUnknown(body []byte) *runtime.Unknown {
	if bytes.HasPrefix(body, protobufMagic) {
		obj, _, err := protobufSerializer.Decode(body, nil, nil)
		if err != nil {
			return nil
		}
		if body, err = json.Marshal(obj); err != nil {
			return nil
		}
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	if !json.Valid(body) {
		converted, err := yaml.YAMLToJSON(body)
		if err != nil || !json.Valid(converted) || !bytes.HasPrefix(bytes.TrimSpace(converted), []byte("{")) {
			return nil
		}
		body = converted
	}
	return &runtime.Unknown{Raw: append([]byte(nil), body...), ContentType: runtime.ContentTypeJSON}
}

func userInfo(u *auth.User) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: append([]string(nil), u.Groups...)}
	if len(u.Extra) > 0 {
		info.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range u.Extra {
			info.Extra[k] = v
		}
	}
	return info
}

// sourceIPs are the client's address, after those an X-Forwarded-For header names, as
// kube-apiserver lists them.
func sourceIPs(r *http.Request) []string {
	var ips []string
	for _, part := range strings.Split(r.Header.Get("X-Forwarded-For"), ",") {
		if ip := net.ParseIP(strings.TrimSpace(part)); ip != nil {
			ips = append(ips, ip.String())
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if ip := net.ParseIP(host); ip != nil {
			ips = append(ips, ip.String())
		}
	}
	return ips
}
