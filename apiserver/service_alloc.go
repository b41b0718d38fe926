package apiserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// Services' cluster IPs and node ports are handed out from two ranges, each tracked as a
// bitmap in one RangeAllocation object in etcd (<prefix>/ranges/serviceips and
// <prefix>/ranges/servicenodeports), as kube-apiserver has long kept them. Every change
// is a compare-and-swap of that object, so no value is handed out twice, also by two API
// servers at once, and the allocation survives restarts with the data. A Service's values
// are claimed before it is written and freed once it is gone (or an update dropped them).
// A crash between claiming and writing leaks the claimed values; nothing repairs that.

// errRangeFull: every offset of a range is taken.
var errRangeFull = errors.New("range is full")

// errTaken: a requested offset is already taken.
type errTaken struct{ offset int }

func (e errTaken) Error() string { return fmt.Sprintf("offset %d is already allocated", e.offset) }

// rangeAllocator hands out the offsets 0..size-1 of one range.
type rangeAllocator struct {
	store     store.Store
	key       string
	rangeText string // RangeAllocation.range, e.g. "10.96.0.0/12"
	size      int
	// static is the size of the lower band kept for values asked for by name: random picks
	// come from above it while any is free there, so a Service that asks for a fixed IP or
	// port does not lose it to one that did not care (kube-apiserver's static subrange).
	static int

	mu  sync.Mutex
	rnd *rand.Rand
}

func newRangeAllocator(st store.Store, key, rangeText string, size, static int) *rangeAllocator {
	return &rangeAllocator{store: st, key: key, rangeText: rangeText, size: size, static: static, rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// staticBand returns the size of a range's band for requested values as kube-apiserver
// sizes it: rangeSize/step, but at least lo and at most hi, and none for ranges of lo or
// fewer values.
func staticBand(rangeSize, lo, hi, step int) int {
	if rangeSize <= lo {
		return 0
	}
	return min(max(rangeSize/step, lo), hi)
}

// change claims the offsets in want (failing with errTaken if one is taken), claims n more
// free ones, and frees those in free, in one write; it returns the n offsets it picked.
// With dryRun it reports what it would do and writes nothing.
func (a *rangeAllocator) change(ctx context.Context, want []int, n int, free []int, dryRun bool) ([]int, error) {
	if len(want) == 0 && n == 0 && len(free) == 0 {
		return nil, nil
	}
	if err := a.ensure(ctx); err != nil {
		return nil, err
	}
	var picked []int
	_, err := a.store.GuaranteedUpdate(ctx, a.key, func(cur runtime.Object) (runtime.Object, error) {
		ra := cur.(*corev1.RangeAllocation)
		bits := make([]byte, (a.size+7)/8)
		copy(bits, ra.Data)
		picked = picked[:0]
		for _, o := range free {
			if o >= 0 && o < a.size {
				bits[o/8] &^= 1 << (o % 8)
			}
		}
		for _, o := range want {
			if bits[o/8]&(1<<(o%8)) != 0 {
				return nil, errTaken{offset: o}
			}
			bits[o/8] |= 1 << (o % 8)
		}
		for i := 0; i < n; i++ {
			o, ok := a.pick(bits)
			if !ok {
				return nil, errRangeFull
			}
			bits[o/8] |= 1 << (o % 8)
			picked = append(picked, o)
		}
		if dryRun {
			return nil, errDryRun{}
		}
		ra.Range, ra.Data = a.rangeText, bits
		return ra, nil
	}, store.UpdateOptions{})
	var dr errDryRun
	if errors.As(err, &dr) {
		err = nil
	}
	return picked, err
}

// pick returns a free offset, from above the static band while one is free there, else from
// within it; each search starts at a random offset so that values are spread as
// kube-apiserver spreads them.
func (a *rangeAllocator) pick(bits []byte) (int, bool) {
	if o, ok := a.pickIn(bits, a.static, a.size); ok {
		return o, true
	}
	return a.pickIn(bits, 0, a.static)
}

// pickIn returns a free offset in [lo, hi).
func (a *rangeAllocator) pickIn(bits []byte, lo, hi int) (int, bool) {
	n := hi - lo
	if n <= 0 {
		return 0, false
	}
	a.mu.Lock()
	start := a.rnd.IntN(n)
	a.mu.Unlock()
	for i := 0; i < n; i++ {
		o := lo + (start+i)%n
		if bits[o/8]&(1<<(o%8)) == 0 {
			return o, true
		}
	}
	return 0, false
}

// ensure creates the empty RangeAllocation on first use.
func (a *rangeAllocator) ensure(ctx context.Context) error {
	if _, err := a.store.Get(ctx, a.key); err == nil || !errors.Is(err, store.ErrNotFound) {
		return err
	}
	ra := &corev1.RangeAllocation{ObjectMeta: metav1.ObjectMeta{Name: a.rangeText}, Range: a.rangeText, Data: make([]byte, (a.size+7)/8)}
	_, err := a.store.Create(ctx, a.key, ra, 0)
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil
	}
	return err
}

// serviceAllocator gives Services their cluster IP and node ports.
type serviceAllocator struct {
	ips, ports *rangeAllocator
	cidr       *net.IPNet
	base       uint32 // the network address of cidr
	firstPort  int
	portRange  string
}

func newServiceAllocator(st store.Store, prefix string, cidr *net.IPNet, firstPort, lastPort int) *serviceAllocator {
	ones, bits := cidr.Mask.Size()
	// The network and broadcast addresses are never handed out.
	size := 1<<(bits-ones) - 2
	ports := lastPort - firstPort + 1
	portRange := fmt.Sprintf("%d-%d", firstPort, lastPort)
	return &serviceAllocator{
		ips:       newRangeAllocator(st, prefix+"/ranges/serviceips", cidr.String(), size, staticBand(1<<(bits-ones), 16, 256, 16)),
		ports:     newRangeAllocator(st, prefix+"/ranges/servicenodeports", portRange, ports, staticBand(ports, 16, 128, 32)),
		cidr:      cidr,
		base:      binary.BigEndian.Uint32(cidr.IP.To4()),
		firstPort: firstPort,
		portRange: portRange,
	}
}

func (a *serviceAllocator) ipAt(offset int) string {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, a.base+1+uint32(offset))
	return ip.String()
}

// ipOffset returns the offset of ip in the range, or false when ip is outside it (or is
// its network or broadcast address).
func (a *serviceAllocator) ipOffset(s string) (int, bool) {
	ip := net.ParseIP(s).To4()
	if ip == nil || !a.cidr.Contains(ip) {
		return 0, false
	}
	o := int(binary.BigEndian.Uint32(ip)) - int(a.base) - 1
	return o, o >= 0 && o < a.ips.size
}

// firstIP is the address of the `kubernetes` Service.
func (a *serviceAllocator) firstIP() string { return a.ipAt(0) }

// allocate claims what svc needs and old (nil on create) did not hold, and writes the
// values picked into svc. undo frees them again if the write of svc fails.
func (a *serviceAllocator) allocate(ctx context.Context, svc, old *corev1.Service, dryRun bool) (func(), error) {
	var ipWant []int
	ipNext := 0
	var errs field.ErrorList
	ipPath := field.NewPath("spec", "clusterIPs").Index(0)
	if hasClusterIP(svc) {
		switch {
		case svc.Spec.ClusterIP == "":
			ipNext = 1
		case old != nil && hasClusterIP(old) && old.Spec.ClusterIP == svc.Spec.ClusterIP:
		default:
			o, ok := a.ipOffset(svc.Spec.ClusterIP)
			if !ok {
				errs = append(errs, field.Invalid(ipPath, svc.Spec.ClusterIPs, fmt.Sprintf(
					"failed to allocate IP %s: the provided IP (%s) is not in the valid range. The range of valid IPs is %s",
					svc.Spec.ClusterIP, svc.Spec.ClusterIP, a.cidr)))
			}
			ipWant = []int{o}
		}
	}
	held := map[int32]bool{}
	if old != nil && usesNodePorts(old) {
		for _, p := range old.Spec.Ports {
			held[p.NodePort] = true
		}
	}
	var portWant []int
	portNext := 0
	claimed := map[int32]bool{}
	if usesNodePorts(svc) {
		for i, p := range svc.Spec.Ports {
			switch {
			case p.NodePort == 0:
				portNext++
			case held[p.NodePort] || claimed[p.NodePort]:
			case int(p.NodePort) < a.firstPort || int(p.NodePort) >= a.firstPort+a.ports.size:
				errs = append(errs, field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), p.NodePort,
					"provided port is not in the valid range. The range of valid ports is "+a.portRange))
			default:
				claimed[p.NodePort] = true
				portWant = append(portWant, int(p.NodePort)-a.firstPort)
			}
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name, errs)
	}
	ipPicked, err := a.ips.change(ctx, ipWant, ipNext, nil, dryRun)
	if err != nil {
		return nil, a.allocationError(svc, err, ipPath, svc.Spec.ClusterIPs, "failed to allocate IP "+svc.Spec.ClusterIP+": ")
	}
	ipClaimed := append(ipWant, ipPicked...)
	portPicked, err := a.ports.change(ctx, portWant, portNext, nil, dryRun)
	if err != nil {
		if !dryRun {
			a.free(ctx, a.ips, ipClaimed)
		}
		return nil, a.portError(svc, err)
	}
	portClaimed := append(portWant, portPicked...)
	if len(ipPicked) == 1 {
		svc.Spec.ClusterIP = a.ipAt(ipPicked[0])
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	for i := range svc.Spec.Ports {
		if usesNodePorts(svc) && svc.Spec.Ports[i].NodePort == 0 && len(portPicked) > 0 {
			svc.Spec.Ports[i].NodePort = int32(a.firstPort + portPicked[0])
			portPicked = portPicked[1:]
		}
	}
	undo := func() {
		if !dryRun {
			a.free(ctx, a.ips, ipClaimed)
			a.free(ctx, a.ports, portClaimed)
		}
	}
	return undo, nil
}

// free returns offsets to r; it runs after the request that claimed them may be over.
func (a *serviceAllocator) free(ctx context.Context, r *rangeAllocator, offsets []int) {
	if len(offsets) > 0 {
		_, _ = r.change(context.WithoutCancel(ctx), nil, 0, offsets, false)
	}
}

// release frees what old held and svc (nil once the Service is gone) no longer holds.
func (a *serviceAllocator) release(ctx context.Context, svc, old *corev1.Service) {
	if hasClusterIP(old) && old.Spec.ClusterIP != "" && (svc == nil || !hasClusterIP(svc) || svc.Spec.ClusterIP != old.Spec.ClusterIP) {
		if o, ok := a.ipOffset(old.Spec.ClusterIP); ok {
			a.free(ctx, a.ips, []int{o})
		}
	}
	if !usesNodePorts(old) {
		return
	}
	keep := map[int32]bool{}
	if svc != nil && usesNodePorts(svc) {
		for _, p := range svc.Spec.Ports {
			keep[p.NodePort] = true
		}
	}
	var free []int
	for _, p := range old.Spec.Ports {
		if p.NodePort != 0 && !keep[p.NodePort] {
			free = append(free, int(p.NodePort)-a.firstPort)
		}
	}
	a.free(ctx, a.ports, free)
}

func (a *serviceAllocator) allocationError(svc *corev1.Service, err error, p *field.Path, value any, prefix string) error {
	var taken errTaken
	switch {
	case errors.As(err, &taken):
		return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name,
			field.ErrorList{field.Invalid(p, value, prefix+"provided IP is already allocated")})
	case errors.Is(err, errRangeFull):
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: range is full"))
	}
	return err
}

func (a *serviceAllocator) portError(svc *corev1.Service, err error) error {
	var taken errTaken
	switch {
	case errors.As(err, &taken):
		port := int32(a.firstPort + taken.offset)
		for i, p := range svc.Spec.Ports {
			if p.NodePort == port {
				return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name,
					field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), port, "provided port is already allocated")})
			}
		}
	case errors.Is(err, errRangeFull):
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: range is full"))
	}
	return err
}
