/* The BPF object of ident.bpf.c, built into dsockd (daemon/ident.c opens
 * it from memory): no file to find or trust at run time. */
	.section .rodata
	.balign 8
	.global dsock_ident_bpf_start
	.global dsock_ident_bpf_end
dsock_ident_bpf_start:
	.incbin IDENT_BPF_OBJ
dsock_ident_bpf_end:
	.section .note.GNU-stack,"",@progbits
