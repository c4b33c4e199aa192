package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// EnvChromium names the Chromium binary for browser tests (deploy/local/env prints
// TXKIT_CHROMIUM=/usr/bin/chromium; deploy/local/up installs Debian's chromium and chromium-driver).
const EnvChromium = "TXKIT_CHROMIUM"

// Chromium returns the path of the Chromium binary named by TXKIT_CHROMIUM after checking that it
// runs (`chromium --version`). It skips the test only under -short; an unset variable or a binary
// that is missing or does not run fails it, naming the variable and `make up`.
func Chromium(t testing.TB) string {
	t.Helper()
	path := Lookup(t, EnvChromium)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Chromium at %s=%s: %v (deploy/local/up installs chromium: run `make up`)", EnvChromium, path, err)
	}
	out, err := exec.CommandContext(t.Context(), path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("Chromium at %s=%s does not run: %v: %s", EnvChromium, path, err, out)
	}
	return path
}
