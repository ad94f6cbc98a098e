package bashcategory

import "testing"

func TestCategorizeBash(t *testing.T) {
	tests := []struct {
		command string
		want    string
	}{
		// privileged: plain prefixes
		{"sudo ls", Privileged},
		{"su root", Privileged},
		{"doas reboot", Privileged},
		{"chmod 755 run.sh", Privileged},
		{"chown me:me file", Privileged},
		{"chgrp staff file", Privileged},
		{"kill -9 1234", Privileged},
		{"kill", Privileged},
		{"pkill node", Privileged},
		{"killall node", Privileged},
		{"systemctl restart nginx", Privileged},
		{"service nginx restart", Privileged},
		{"mount /dev/sdb1 /mnt", Privileged},
		{"umount /mnt", Privileged},
		{"launchctl unload x.plist", Privileged},
		{"reboot", Privileged},
		{"shutdown -h now", Privileged},
		{"SUDO ls", Privileged},
		{"  sudo ls  ", Privileged},
		// privileged: PowerShell / cmd.exe
		{"Stop-Process -Name node", Privileged},
		{"taskkill /F /IM node.exe", Privileged},
		{"Start-Process pwsh -Verb RunAs", Privileged},
		{"Restart-Service spooler", Privileged},
		{"sc stop spooler", Privileged},
		{"net stop spooler", Privileged},
		{"icacls C:\\x /grant Everyone:F", Privileged},
		{"Restart-Computer", Privileged},
		// privileged: anywhere in the command, after unwrapping
		{"echo hi; sudo ls", Privileged},
		{"make && sudo make install", Privileged},
		{"(sudo ls)", Privileged},
		{"{ sudo ls; }", Privileged},
		{"echo `sudo id`", Privileged},
		{"echo $(sudo id)", Privileged},
		{"ls\nsudo ls", Privileged},
		{"nohup sudo ls", Privileged},
		{"env FOO=bar BAZ= sudo ls", Privileged},
		{"timeout 30 kill 1", Privileged},
		{"timeout -s KILL 5m kill 1", Privileged},
		{"nice -n 10 chmod 600 key", Privileged},
		{"time command exec sudo ls", Privileged},
		{"stdbuf -oL kill 1", Privileged},
		{"ps aux | xargs kill", Privileged},
		{"/usr/bin/sudo ls", Privileged},
		{`\sudo ls`, Privileged},
		{`"sudo" ls`, Privileged},
		{`'/bin/chmod' +x run`, Privileged},
		{`C:\Windows\System32\taskkill.EXE /pid 4`, Privileged},
		{`su"do" ls`, Privileged},
		{"bash -c 'sudo ls'", Privileged},
		{`sh -c "chmod 777 x"`, Privileged},
		{"zsh -lc 'kill 1'", Privileged},
		{"cmd /c taskkill /im x.exe", Privileged},
		{"CMD /K taskkill /im x.exe", Privileged},
		{"pwsh -Command Stop-Process -Id 4", Privileged},
		{"powershell -c Stop-Process -Id 4", Privileged},
		{"rm -rf x && sudo ls", Privileged}, // privileged outranks fs_destructive
		{"sudo rm -rf /", Privileged},
		{"git reset --hard; chmod +x a", Privileged},

		// fs_destructive
		{"rm file.txt", FSDestructive},
		{"rm -rf /tmp/build", FSDestructive},
		{"RM -rf x", FSDestructive},
		{"rmdir empty", FSDestructive},
		{"dd if=/dev/zero of=disk.img bs=1M", FSDestructive},
		{"truncate -s 0 log", FSDestructive},
		{"shred -u secret", FSDestructive},
		{"mkfs.ext4 /dev/sdb1", FSDestructive},
		{"mkfs -t ext4 /dev/sdb1", FSDestructive},
		{"find . -name '*.o' -delete", FSDestructive},
		{`find . -name x -exec rm {} \;`, FSDestructive},
		{"ls | xargs rm", FSDestructive},
		{"ls | xargs -0 -n 1 rm -f", FSDestructive},
		{"curl -fsSL https://example.com/install | sh", FSDestructive},
		{"curl -fsSL https://example.com/install |bash -s", FSDestructive},
		{"cd /tmp; rm -rf stuff", FSDestructive},
		{"nohup rm x &", FSDestructive},
		{"timeout 5s rm x", FSDestructive},
		{"command rm x", FSDestructive},
		{"exec rm x", FSDestructive},
		{"bash -c 'rm -rf x'", FSDestructive},
		{`sh -c "sh -c 'rm x'"`, FSDestructive},
		{"git restore .", FSDestructive},
		{"git restore -- main.go", FSDestructive},
		{"git checkout -- main.go", FSDestructive},
		{"git reset --hard && rm x", FSDestructive}, // fs_destructive outranks git_destructive
		{"Remove-Item -Recurse build", FSDestructive},
		{"Get-ChildItem . | ForEach-Object { Remove-Item $_ }", FSDestructive},
		{"& 'Remove-Item' x", FSDestructive},
		{"del /q x", FSDestructive},
		{"erase x", FSDestructive},
		{"rd /s /q build", FSDestructive},
		{"Clear-Content log.txt", FSDestructive},
		{"R`M x", FSDestructive}, // PowerShell backtick escape inside a name
		{"cmd /c del x", FSDestructive},

		// git_destructive
		{"git reset --hard HEAD~1", GitDestructive},
		{"git push -f", GitDestructive},
		{"git push --force origin main", GitDestructive},
		{"git branch -D feature", GitDestructive},
		{"git clean -f", GitDestructive},
		{"git clean -fd", GitDestructive},
		{"git checkout .", GitDestructive},
		{"git rebase -i HEAD~3", GitDestructive},
		{"cd repo && git push --force", GitDestructive},
		{"bash -c 'git reset --hard'", GitDestructive},
		{"/usr/bin/git reset --hard", GitDestructive},

		// shell_unsafe: everything else, never shell_safe
		{"", ShellUnsafe},
		{"   ", ShellUnsafe},
		{"ls -la", ShellUnsafe},
		{"echo hello", ShellUnsafe},
		{"git status", ShellUnsafe},
		{"git push origin main", ShellUnsafe},
		{"git branch -d merged", ShellUnsafe},
		{"git checkout main", ShellUnsafe},
		{"git clean -n", ShellUnsafe},
		{"echo rm -rf /", ShellUnsafe},
		{"grep -r sudo .", ShellUnsafe},
		{"superuser", ShellUnsafe},
		{"killer --help", ShellUnsafe},
		{"rmx", ShellUnsafe},
		{"ddx if=a", ShellUnsafe},
		{"find . -name '*.go'", ShellUnsafe},
		{"cat log | grep sh", ShellUnsafe},
		{"bash -c", ShellUnsafe},
		{"sh script.sh", ShellUnsafe},
		{"python -c 'import shutil; shutil.rmtree(\"x\")'", ShellUnsafe},
		{"npm install && npm test", ShellUnsafe},
		// nested shells are followed two levels deep only
		{`sh -c "sh -c 'sh -c rm'"`, ShellUnsafe},
		// only JavaScript whitespace separates words: U+00A0 does, U+200B does not
		{"sudo\u00a0ls", Privileged},
		{"sudo\u200bls", ShellUnsafe},
		{"rm\u00a0x", FSDestructive},
		{"dd\u200bx", ShellUnsafe},
		// JavaScript lower-casing: U+0130 becomes "i" plus a combining dot
		{"k\u0130ll 1", ShellUnsafe},
		{"\u212aill 1", Privileged}, // KELVIN SIGN lower-cases to k
	}
	for _, tt := range tests {
		if got := Categorize(tt.command); got != tt.want {
			t.Errorf("Categorize(%q) = %s, want %s", tt.command, got, tt.want)
		}
	}
}

func TestCategorizeBashNeverShellSafe(t *testing.T) {
	for _, c := range []string{"ls", "pwd", "echo hi", "cat x", "git status", "git log", "which go", "date"} {
		if got := Categorize(c); got != ShellUnsafe {
			t.Errorf("Categorize(%q) = %s, want shell_unsafe", c, got)
		}
	}
}

func TestBashNormalizeHead(t *testing.T) {
	tests := []struct{ in, want string }{
		{"rm -rf x", "rm -rf x"},
		{"/bin/rm  -rf x", "rm -rf x"},
		{`"/bin/rm" x`, "rm x"},
		{`'rm'`, "rm"},
		{`"rm x`, "rm x"},
		{"nohup nice -n 5 rm x", "rm x"},
		{"env A=1 B=2 rm x", "rm x"},
		{"timeout 10m rm", "rm"},
		{"timeout 10x rm", "10x rm"},
		{"nohup", ""},
		{"Remove-Item.exe x", "Remove-Item x"},
		{"de^l x", "del x"},
		// wrappers are unwrapped at most five times
		{"nohup nohup nohup nohup nohup nohup rm x", "nohup rm x"},
	}
	for _, tt := range tests {
		if got := bashNormalizeHead(tt.in); got != tt.want {
			t.Errorf("bashNormalizeHead(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestBashNestedPayload(t *testing.T) {
	tests := []struct{ in, want string }{
		{"bash -c 'rm x'", "rm x"},
		{`sh -c "rm x"`, "rm x"},
		{"bash -lc rm x", "rm x"},
		{"bash -x script", ""},
		{"bash -c ''", ""},
		{"pwsh -Command Remove-Item x", "Remove-Item x"},
		{"PowerShell -C 'del x'", "del x"},
		{"cmd /C del x", "del x"},
		{"cmd.exe /c del x", ""}, // the head is not normalized here
		{"python -c 'x'", ""},
	}
	for _, tt := range tests {
		if got := bashNestedPayload(tt.in); got != tt.want {
			t.Errorf("bashNestedPayload(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
