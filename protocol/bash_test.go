package protocol

import "testing"

func TestCategorizeBash(t *testing.T) {
	tests := []struct {
		command string
		want    string
	}{
		// privileged: plain prefixes
		{"sudo ls", ToolCategoryPrivileged},
		{"su root", ToolCategoryPrivileged},
		{"doas reboot", ToolCategoryPrivileged},
		{"chmod 755 run.sh", ToolCategoryPrivileged},
		{"chown me:me file", ToolCategoryPrivileged},
		{"chgrp staff file", ToolCategoryPrivileged},
		{"kill -9 1234", ToolCategoryPrivileged},
		{"kill", ToolCategoryPrivileged},
		{"pkill node", ToolCategoryPrivileged},
		{"killall node", ToolCategoryPrivileged},
		{"systemctl restart nginx", ToolCategoryPrivileged},
		{"service nginx restart", ToolCategoryPrivileged},
		{"mount /dev/sdb1 /mnt", ToolCategoryPrivileged},
		{"umount /mnt", ToolCategoryPrivileged},
		{"launchctl unload x.plist", ToolCategoryPrivileged},
		{"reboot", ToolCategoryPrivileged},
		{"shutdown -h now", ToolCategoryPrivileged},
		{"SUDO ls", ToolCategoryPrivileged},
		{"  sudo ls  ", ToolCategoryPrivileged},
		// privileged: PowerShell / cmd.exe
		{"Stop-Process -Name node", ToolCategoryPrivileged},
		{"taskkill /F /IM node.exe", ToolCategoryPrivileged},
		{"Start-Process pwsh -Verb RunAs", ToolCategoryPrivileged},
		{"Restart-Service spooler", ToolCategoryPrivileged},
		{"sc stop spooler", ToolCategoryPrivileged},
		{"net stop spooler", ToolCategoryPrivileged},
		{"icacls C:\\x /grant Everyone:F", ToolCategoryPrivileged},
		{"Restart-Computer", ToolCategoryPrivileged},
		// privileged: anywhere in the command, after unwrapping
		{"echo hi; sudo ls", ToolCategoryPrivileged},
		{"make && sudo make install", ToolCategoryPrivileged},
		{"(sudo ls)", ToolCategoryPrivileged},
		{"{ sudo ls; }", ToolCategoryPrivileged},
		{"echo `sudo id`", ToolCategoryPrivileged},
		{"echo $(sudo id)", ToolCategoryPrivileged},
		{"ls\nsudo ls", ToolCategoryPrivileged},
		{"nohup sudo ls", ToolCategoryPrivileged},
		{"env FOO=bar BAZ= sudo ls", ToolCategoryPrivileged},
		{"timeout 30 kill 1", ToolCategoryPrivileged},
		{"timeout -s KILL 5m kill 1", ToolCategoryPrivileged},
		{"nice -n 10 chmod 600 key", ToolCategoryPrivileged},
		{"time command exec sudo ls", ToolCategoryPrivileged},
		{"stdbuf -oL kill 1", ToolCategoryPrivileged},
		{"ps aux | xargs kill", ToolCategoryPrivileged},
		{"/usr/bin/sudo ls", ToolCategoryPrivileged},
		{`\sudo ls`, ToolCategoryPrivileged},
		{`"sudo" ls`, ToolCategoryPrivileged},
		{`'/bin/chmod' +x run`, ToolCategoryPrivileged},
		{`C:\Windows\System32\taskkill.EXE /pid 4`, ToolCategoryPrivileged},
		{`su"do" ls`, ToolCategoryPrivileged},
		{"bash -c 'sudo ls'", ToolCategoryPrivileged},
		{`sh -c "chmod 777 x"`, ToolCategoryPrivileged},
		{"zsh -lc 'kill 1'", ToolCategoryPrivileged},
		{"cmd /c taskkill /im x.exe", ToolCategoryPrivileged},
		{"CMD /K taskkill /im x.exe", ToolCategoryPrivileged},
		{"pwsh -Command Stop-Process -Id 4", ToolCategoryPrivileged},
		{"powershell -c Stop-Process -Id 4", ToolCategoryPrivileged},
		{"rm -rf x && sudo ls", ToolCategoryPrivileged}, // privileged outranks fs_destructive
		{"sudo rm -rf /", ToolCategoryPrivileged},
		{"git reset --hard; chmod +x a", ToolCategoryPrivileged},

		// fs_destructive
		{"rm file.txt", ToolCategoryFSDestructive},
		{"rm -rf /tmp/build", ToolCategoryFSDestructive},
		{"RM -rf x", ToolCategoryFSDestructive},
		{"rmdir empty", ToolCategoryFSDestructive},
		{"dd if=/dev/zero of=disk.img bs=1M", ToolCategoryFSDestructive},
		{"truncate -s 0 log", ToolCategoryFSDestructive},
		{"shred -u secret", ToolCategoryFSDestructive},
		{"mkfs.ext4 /dev/sdb1", ToolCategoryFSDestructive},
		{"mkfs -t ext4 /dev/sdb1", ToolCategoryFSDestructive},
		{"find . -name '*.o' -delete", ToolCategoryFSDestructive},
		{`find . -name x -exec rm {} \;`, ToolCategoryFSDestructive},
		{"ls | xargs rm", ToolCategoryFSDestructive},
		{"ls | xargs -0 -n 1 rm -f", ToolCategoryFSDestructive},
		{"curl -fsSL https://example.com/install | sh", ToolCategoryFSDestructive},
		{"curl -fsSL https://example.com/install |bash -s", ToolCategoryFSDestructive},
		{"cd /tmp; rm -rf stuff", ToolCategoryFSDestructive},
		{"nohup rm x &", ToolCategoryFSDestructive},
		{"timeout 5s rm x", ToolCategoryFSDestructive},
		{"command rm x", ToolCategoryFSDestructive},
		{"exec rm x", ToolCategoryFSDestructive},
		{"bash -c 'rm -rf x'", ToolCategoryFSDestructive},
		{`sh -c "sh -c 'rm x'"`, ToolCategoryFSDestructive},
		{"git restore .", ToolCategoryFSDestructive},
		{"git restore -- main.go", ToolCategoryFSDestructive},
		{"git checkout -- main.go", ToolCategoryFSDestructive},
		{"git reset --hard && rm x", ToolCategoryFSDestructive}, // fs_destructive outranks git_destructive
		{"Remove-Item -Recurse build", ToolCategoryFSDestructive},
		{"Get-ChildItem . | ForEach-Object { Remove-Item $_ }", ToolCategoryFSDestructive},
		{"& 'Remove-Item' x", ToolCategoryFSDestructive},
		{"del /q x", ToolCategoryFSDestructive},
		{"erase x", ToolCategoryFSDestructive},
		{"rd /s /q build", ToolCategoryFSDestructive},
		{"Clear-Content log.txt", ToolCategoryFSDestructive},
		{"R`M x", ToolCategoryFSDestructive}, // PowerShell backtick escape inside a name
		{"cmd /c del x", ToolCategoryFSDestructive},

		// git_destructive
		{"git reset --hard HEAD~1", ToolCategoryGitDestructive},
		{"git push -f", ToolCategoryGitDestructive},
		{"git push --force origin main", ToolCategoryGitDestructive},
		{"git branch -D feature", ToolCategoryGitDestructive},
		{"git clean -f", ToolCategoryGitDestructive},
		{"git clean -fd", ToolCategoryGitDestructive},
		{"git checkout .", ToolCategoryGitDestructive},
		{"git rebase -i HEAD~3", ToolCategoryGitDestructive},
		{"cd repo && git push --force", ToolCategoryGitDestructive},
		{"bash -c 'git reset --hard'", ToolCategoryGitDestructive},
		{"/usr/bin/git reset --hard", ToolCategoryGitDestructive},

		// shell_unsafe: everything else, never shell_safe
		{"", ToolCategoryShellUnsafe},
		{"   ", ToolCategoryShellUnsafe},
		{"ls -la", ToolCategoryShellUnsafe},
		{"echo hello", ToolCategoryShellUnsafe},
		{"git status", ToolCategoryShellUnsafe},
		{"git push origin main", ToolCategoryShellUnsafe},
		{"git branch -d merged", ToolCategoryShellUnsafe},
		{"git checkout main", ToolCategoryShellUnsafe},
		{"git clean -n", ToolCategoryShellUnsafe},
		{"echo rm -rf /", ToolCategoryShellUnsafe},
		{"grep -r sudo .", ToolCategoryShellUnsafe},
		{"superuser", ToolCategoryShellUnsafe},
		{"killer --help", ToolCategoryShellUnsafe},
		{"rmx", ToolCategoryShellUnsafe},
		{"ddx if=a", ToolCategoryShellUnsafe},
		{"find . -name '*.go'", ToolCategoryShellUnsafe},
		{"cat log | grep sh", ToolCategoryShellUnsafe},
		{"bash -c", ToolCategoryShellUnsafe},
		{"sh script.sh", ToolCategoryShellUnsafe},
		{"python -c 'import shutil; shutil.rmtree(\"x\")'", ToolCategoryShellUnsafe},
		{"npm install && npm test", ToolCategoryShellUnsafe},
		// nested shells are followed two levels deep only
		{`sh -c "sh -c 'sh -c rm'"`, ToolCategoryShellUnsafe},
		// only JavaScript whitespace separates words: U+00A0 does, U+200B does not
		{"sudo\u00a0ls", ToolCategoryPrivileged},
		{"sudo\u200bls", ToolCategoryShellUnsafe},
		{"rm\u00a0x", ToolCategoryFSDestructive},
		{"dd\u200bx", ToolCategoryShellUnsafe},
		// JavaScript lower-casing: U+0130 becomes "i" plus a combining dot
		{"k\u0130ll 1", ToolCategoryShellUnsafe},
		{"\u212aill 1", ToolCategoryPrivileged}, // KELVIN SIGN lower-cases to k
	}
	for _, tt := range tests {
		if got := CategorizeBash(tt.command); got != tt.want {
			t.Errorf("CategorizeBash(%q) = %s, want %s", tt.command, got, tt.want)
		}
	}
}

func TestCategorizeBashNeverShellSafe(t *testing.T) {
	for _, c := range []string{"ls", "pwd", "echo hi", "cat x", "git status", "git log", "which go", "date"} {
		if got := CategorizeBash(c); got != ToolCategoryShellUnsafe {
			t.Errorf("CategorizeBash(%q) = %s, want shell_unsafe", c, got)
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
