package controlplane

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/credentials"
)

// TestFleetHasItsOwnConnection: the controllers' clients share one connection to the API
// server (client-go's transport cache), and the in-process stub fleet's client does not use
// it. The server records the client address of each request by user agent.
func TestFleetHasItsOwnConnection(t *testing.T) {
	var mu sync.Mutex
	addrs := map[string]map[string]bool{} // user agent → client addresses
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if addrs[r.UserAgent()] == nil {
			addrs[r.UserAgent()] = map[string]bool{}
		}
		addrs[r.UserAgent()][r.RemoteAddr] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}`))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	stub := configs.KubeletStub{}
	fleetUser := credentials.StubIdentity(stub).Name
	cp := &ControlPlane{
		URL:   srv.URL,
		CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
		tokens: map[string]string{
			credentials.ControllerManagerUser: "cm", credentials.SchedulerUser: "sched", fleetUser: "fleet",
		},
	}
	// The clientsets are kept until the end: client-go's transport cache holds a transport only
	// while a client uses it, as the components in a control plane do.
	var clients []kubernetes.Interface
	for _, rc := range []*rest.Config{
		cp.ConfigFor(credentials.ControllerManagerUser), cp.ConfigFor(credentials.SchedulerUser), cp.fleetConfig(stub),
		cp.ConfigFor(credentials.ControllerManagerUser), cp.fleetConfig(stub),
	} {
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatalf("%s: %v", rc.UserAgent, err)
		}
		clients = append(clients, c)
	}
	runtime.KeepAlive(clients)

	mu.Lock()
	defer mu.Unlock()
	cm, sched := addrs["miniplane/"+credentials.ControllerManagerUser], addrs["miniplane/"+credentials.SchedulerUser]
	fleet := addrs["miniplane/"+fleetUser]
	if len(cm) != 1 || len(sched) != 1 || len(fleet) == 0 {
		t.Fatalf("client addresses by user agent: %v", addrs)
	}
	for a := range cm {
		if !sched[a] {
			t.Errorf("controller-manager from %v, scheduler from %v: want one shared connection", cm, sched)
		}
		if fleet[a] {
			t.Errorf("the fleet's requests came over the controllers' connection %s", a)
		}
	}
}
