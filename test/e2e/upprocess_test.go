package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// upProcess is a `miniplane up` a test started; it is stopped with SIGINT when the test ends,
// and its output is logged then if the test failed.
type upProcess struct {
	// Kubeconfig is the admin kubeconfig up writes into its data dir once it serves.
	Kubeconfig string
	// Out collects up's stdout and stderr.
	Out *lockedBuffer
	// Done receives up's exit.
	Done <-chan error
}

// startUpProcess runs bin's `up` on dataDir with args and extra environment. The API server
// listens on port 0 and up writes the port it got into the kubeconfig: a port picked free
// beforehand can be taken, by any other test's connection, before up binds it.
func startUpProcess(t *testing.T, bin, dataDir string, env []string, args ...string) *upProcess {
	t.Helper()
	args = append([]string{"up", "--data-dir", dataDir, "--listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // the process this test started, by its handle
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("miniplane up did not stop on SIGINT")
		}
		if t.Failed() {
			t.Logf("miniplane %s\n%s", strings.Join(args, " "), out.String())
		}
	})
	return &upProcess{Kubeconfig: filepath.Join(dataDir, "kubeconfig"), Out: out, Done: done}
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
