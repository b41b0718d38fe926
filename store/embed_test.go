package store

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestQuietOnCloseDropsOnlyTheListenerErrorsOfAClose(t *testing.T) {
	tests := []struct {
		name    string
		closing bool
		msg     string
		logged  bool
	}{
		{"listener error while running", false, serveFailed, true},
		{"listener error while closing", true, serveFailed, false},
		{"other error while closing", true, "failed to publish local member", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, logs := observer.New(zapcore.DebugLevel)
			closing := new(atomic.Bool)
			closing.Store(tt.closing)
			lg := zap.New(quietOnClose{Core: obs, closing: closing}).With(zap.String("name", "default"))
			lg.Error(tt.msg)
			if got := logs.Len() == 1; got != tt.logged {
				t.Errorf("logged = %v, want %v", got, tt.logged)
			}
		})
	}
}

func TestQuietOnCloseLoggerRejectsAnUnknownLevel(t *testing.T) {
	if _, err := quietOnCloseLogger("loud", new(atomic.Bool)); err == nil {
		t.Fatal("an unknown level was accepted")
	}
}
