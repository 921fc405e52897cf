package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return out.String(), errb.String(), code
}

// TestBashCompletionCompletes sources the generated script in a real bash and
// asks it to complete: a command, a flag, an enum value, a GPU and a model id.
func TestBashCompletionCompletes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	script, _, code := runMain(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash exited %d", code)
	}
	file := filepath.Join(t.TempDir(), "c.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words []string
		want  string
		not   string // a spelling it must not offer beside want
	}{
		{[]string{"canifinetune", "esti"}, "estimate", ""},
		// Aliases parse but are not offered: zero3 once, not zero-3 and zero_3.
		{[]string{"canifinetune", "estimate", "x", "--strategy", "zero"}, "zero3", "zero-3"},
		{[]string{"canifinetune", "estimate", "x", "--attn", "f"}, "flash_attention_2", "fa2"},
		{[]string{"canifinetune", "estimate", "Qwen/Qwen2.5-7B", "--seq-l"}, "--seq-len", ""},
		{[]string{"canifinetune", "estimate", "x", "--method", "ql"}, "qlora", ""},
		{[]string{"canifinetune", "estimate", "x", "--gpu", "rtx-40"}, "rtx-4090", ""},
		{[]string{"canifinetune", "estimate", "Qwen/Qwen2.5-7"}, "Qwen/Qwen2.5-7B", ""},
		{[]string{"canifinetune", "completion", "--he"}, "--help", ""},
	} {
		var quoted []string
		for _, w := range tt.words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + file + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
			string(rune('0'+len(tt.words)-1)) + "; _canifinetune; printf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tt.words, err, out)
		}
		if !strings.Contains("\n"+string(out), "\n"+tt.want+"\n") {
			t.Errorf("completing %q: got %q, want it to offer %q", tt.words, out, tt.want)
		}
		if tt.not != "" && strings.Contains("\n"+string(out), "\n"+tt.not+"\n") {
			t.Errorf("completing %q: got %q, which offers the alias %q beside %q", tt.words, out, tt.not, tt.want)
		}
	}
}

func TestZshAndFishCompletion(t *testing.T) {
	zsh, _, code := runMain(t, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(zsh, "#compdef canifinetune\n") || !strings.Contains(zsh, "complete -o default -F _canifinetune canifinetune") {
		t.Errorf("zsh script (exit %d) lacks its #compdef header or the bash-emulation body:\n%.300s", code, zsh)
	}
	fish, _, code := runMain(t, "completion", "fish")
	if code != 0 {
		t.Fatalf("completion fish exited %d", code)
	}
	for _, want := range []string{
		"complete -c canifinetune -n __fish_use_subcommand -a estimate -d ",
		"complete -c canifinetune -n '__fish_seen_subcommand_from estimate' -l method -r -a 'full lora qlora' -d ",
	} {
		if !strings.Contains(fish, want) {
			t.Errorf("fish script lacks %q", want)
		}
	}
	for shell, script := range map[string]string{"zsh": zsh, "fish": fish} {
		if bin, err := exec.LookPath(shell); err == nil {
			if out, err := exec.Command(bin, "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("%s -n rejects the script: %v\n%s", shell, err, out)
			}
		}
	}
	if _, stderr, code := runMain(t, "completion", "tcsh"); code != ExitUsage || !strings.Contains(stderr, `"bash","zsh","fish"`) {
		t.Errorf("completion tcsh: exit %d, stderr %q; want a usage error naming the shells", code, stderr)
	}
}

func TestHelpCommandMatchesFlag(t *testing.T) {
	for _, args := range [][]string{{"estimate"}, {"trace"}, {}} {
		viaHelp, _, code := runMain(t, append([]string{"help"}, args...)...)
		viaFlag, _, code2 := runMain(t, append(args, "--help")...)
		if code != 0 || code2 != 0 || viaHelp != viaFlag || viaHelp == "" {
			t.Errorf("help %v (exit %d) differs from %v --help (exit %d)", args, code, args, code2)
		}
	}
	if _, stderr, code := runMain(t, "help", "nope"); code != ExitUsage || !strings.Contains(stderr, "nope") {
		t.Errorf("help nope: exit %d, stderr %q", code, stderr)
	}
}
