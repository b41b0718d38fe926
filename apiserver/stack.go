package apiserver

// The HTTP/2 server runs every request in a goroutine of its own, which starts with the
// runtime's small initial stack. An update goes deep (router, middleware, the store's
// retry loop, the field manager's recursive walk of the object), so its stack doubled
// several times on the way, each time copying every frame already on it: 4–6% of the API
// server's CPU in a 5,000-node run (docs/performance.md, eighth round). Growing it once,
// at the top of the handler where the stack holds a few frames, costs one small copy.

// requestStackBytes is about the depth an update reaches; deeper ones still grow as usual.
const requestStackBytes = 32 << 10

// growStack makes room for requestStackBytes on the calling goroutine's stack: the
// frame of this function is that large, so the runtime grows the stack to fit it before
// the function runs. i keeps the compiler from shrinking the frame.
//
//go:noinline
func growStack(i int) byte {
	var frame [requestStackBytes]byte
	return frame[i&(len(frame)-1)]
}
