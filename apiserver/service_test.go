package apiserver_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miniplane/miniplane/test/testenv"
)

func service(name string, typ corev1.ServiceType, clusterIP string, nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP, Selector: labelled(name),
			Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort}}},
	}
}

// TestServiceAddresses checks the cluster IPs and node ports Services get: unique, in
// range, the ones asked for when free, refused with kube-apiserver's messages otherwise,
// and handed out again once freed.
func TestServiceAddresses(t *testing.T) {
	env := newEnv(t)
	c := env.Client.CoreV1().Services("default")
	ctx := testCtx(t)
	_, cidr, _ := net.ParseCIDR("10.96.0.0/12")

	kube, err := c.Get(ctx, "kubernetes", metav1.GetOptions{})
	check(t, err)
	if kube.Spec.ClusterIP != "10.96.0.1" || kube.Spec.Ports[0].Port != 443 {
		t.Errorf("kubernetes service: %s %v", kube.Spec.ClusterIP, kube.Spec.Ports)
	}

	// Concurrent creates never get one address twice.
	const n = 20
	ips := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			svc, err := c.Create(ctx, service(fmt.Sprintf("s%d", i), corev1.ServiceTypeNodePort, "", 0), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			ips[i] = svc.Spec.ClusterIP + fmt.Sprintf("/%d", svc.Spec.Ports[0].NodePort)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seenIP, seenPort := map[string]bool{"10.96.0.1": true}, map[string]bool{}
	for _, v := range ips {
		ip, port, _ := strings.Cut(v, "/")
		if seenIP[ip] || seenPort[port] || !cidr.Contains(net.ParseIP(ip)) || port < "30000" || port > "32767" {
			t.Fatalf("address %s handed out twice or out of range (all: %v)", v, ips)
		}
		seenIP[ip], seenPort[port] = true, true
	}

	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		wantErr string // "" means created
	}{
		{"asked-for IP", service("fixed", corev1.ServiceTypeClusterIP, "10.100.0.10", 0), ""},
		{"IP taken", service("fixed2", corev1.ServiceTypeClusterIP, "10.100.0.10", 0), "failed to allocate IP 10.100.0.10: provided IP is already allocated"},
		{"IP out of range", service("outside", corev1.ServiceTypeClusterIP, "192.168.1.1", 0), "the provided IP (192.168.1.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{"asked-for node port", service("np", corev1.ServiceTypeNodePort, "", 30080), ""},
		{"node port taken", service("np2", corev1.ServiceTypeNodePort, "", 30080), "provided port is already allocated"},
		{"node port out of range", service("np3", corev1.ServiceTypeNodePort, "", 8080), "provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{"headless", service("headless", corev1.ServiceTypeClusterIP, "None", 0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Create(ctx, tc.svc, metav1.CreateOptions{})
			if tc.wantErr == "" {
				check(t, err)
				if want := tc.svc.Spec.ClusterIP; want != "" && got.Spec.ClusterIP != want {
					t.Errorf("cluster IP %s, want %s", got.Spec.ClusterIP, want)
				}
				return
			}
			se := expectStatus(t, err, 422, metav1.StatusReasonInvalid)
			if !strings.Contains(se.ErrStatus.Message, tc.wantErr) {
				t.Errorf("message %q, want it to contain %q", se.ErrStatus.Message, tc.wantErr)
			}
		})
	}

	// The cluster IP is immutable; leaving it out of an update keeps it.
	fixed, err := c.Get(ctx, "fixed", metav1.GetOptions{})
	check(t, err)
	fixed.Spec.ClusterIP, fixed.Spec.ClusterIPs = "10.100.0.11", nil
	_, err = c.Update(ctx, fixed, metav1.UpdateOptions{})
	if se := expectStatus(t, err, 422, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "may not change once set") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	fixed.Spec.ClusterIP, fixed.Spec.ClusterIPs = "", nil
	kept, err := c.Update(ctx, fixed, metav1.UpdateOptions{})
	check(t, err)
	if kept.Spec.ClusterIP != "10.100.0.10" {
		t.Errorf("an update without clusterIP gave %q, want the stored 10.100.0.10", kept.Spec.ClusterIP)
	}

	// Freed values can be asked for again: the IP on delete, the node port on a type change.
	check(t, c.Delete(ctx, "fixed", metav1.DeleteOptions{}))
	np, err := c.Get(ctx, "np", metav1.GetOptions{})
	check(t, err)
	np.Spec.Type = corev1.ServiceTypeClusterIP
	np, err = c.Update(ctx, np, metav1.UpdateOptions{})
	check(t, err)
	if np.Spec.Ports[0].NodePort != 0 {
		t.Errorf("node port %d kept after the type became ClusterIP", np.Spec.Ports[0].NodePort)
	}
	_, err = c.Create(ctx, service("again", corev1.ServiceTypeNodePort, "10.100.0.10", 30080), metav1.CreateOptions{})
	check(t, err)
}

// TestServiceAddressesKeptAcrossRestarts restarts the API server on the same data and asks
// for an address a Service got before the restart.
func TestServiceAddressesKeptAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	start := func() *testenv.Env {
		env, err := testenv.Start(context.Background(), testenv.Config{DataDir: dir, UnsafeNoFsync: true, Logger: quietLogger()})
		check(t, err)
		return env
	}
	env := start()
	ctx := testCtx(t)
	svc, err := env.Client.CoreV1().Services("default").Create(ctx, service("web", corev1.ServiceTypeNodePort, "", 0), metav1.CreateOptions{})
	check(t, err)
	env.Stop()

	env = start()
	defer env.Stop()
	_, err = env.Client.CoreV1().Services("default").Create(ctx, service("copy", corev1.ServiceTypeNodePort, svc.Spec.ClusterIP, 0), metav1.CreateOptions{})
	if se := expectStatus(t, err, 422, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "already allocated") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	_, err = env.Client.CoreV1().Services("default").Create(ctx, service("copy", corev1.ServiceTypeNodePort, "", svc.Spec.Ports[0].NodePort), metav1.CreateOptions{})
	if se := expectStatus(t, err, 422, metav1.StatusReasonInvalid); !strings.Contains(se.ErrStatus.Message, "already allocated") {
		t.Errorf("message %q", se.ErrStatus.Message)
	}
	kube, err := env.Client.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	check(t, err)
	if len(kube.Subsets) != 1 || len(kube.Subsets[0].Addresses) != 1 || kube.Subsets[0].Addresses[0].IP != "127.0.0.1" {
		t.Errorf("kubernetes endpoints after a restart: %+v", kube.Subsets)
	}
}
