/* Allow/deny rules: which programs, addresses and ports dsock may take over.
 *
 *   # comment
 *   deny  program sshd          glob on the program's file name (* and ?)
 *   allow program redis-*
 *   deny  addr 10.0.0.0/8       CIDR, IPv4 or IPv6, matched on the peer address
 *   deny  port 22               or a range 6000-6100, matched on either end
 *
 * Rules are read from $DSOCK_RULES (';' or newline separated) first, then
 * from the file $DSOCK_CONFIG (default /etc/dsock.conf if it exists).  Program
 * rules and connection rules are two lists; in each, the first match wins
 * and no match means allow.  Storage is static: no malloc (the parser runs
 * inside the preload library's constructor). */
#ifndef DSOCK_RULES_H
#define DSOCK_RULES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define DSOCK_RULES_MAX 64

enum dsock_rule_kind { DSOCK_RULE_PROGRAM = 1, DSOCK_RULE_ADDR, DSOCK_RULE_PORT };

struct dsock_rule {
	uint8_t allow;
	uint8_t kind;
	uint8_t prefix;   /* ADDR: prefix length over the 128-bit v4-mapped form */
	uint16_t port_lo, port_hi;
	uint8_t addr[16]; /* ADDR: v4-mapped for IPv4 */
	char glob[64];    /* PROGRAM */
};

struct dsock_rules {
	int n;
	struct dsock_rule r[DSOCK_RULES_MAX];
};

/* Parses one line into rules.  Blank lines and comments are accepted.
 * Returns 0, or -EINVAL with a message in err, or -ENOSPC when full. */
int dsock_rules_parse_line(struct dsock_rules *rules, const char *line,
			   char *err, size_t errlen);

/* Calls fn for each line of text (lines separated by '\n' or ';', each
 * shorter than max_line): 0, or the first error (fn's, or a line too
 * long) with "source:line: message" in err.  (dsockd's pairing rules
 * are read through it too.) */
int dsock_rules_each_line(const char *text, const char *source, size_t max_line,
			  int (*fn)(void *ctx, const char *line, char *msg, size_t msglen), void *ctx,
			  char *err, size_t errlen);

/* Parses text with lines separated by '\n' or ';'.  Returns 0 or the first
 * error, with "source:line: message" in err. */
int dsock_rules_parse_text(struct dsock_rules *rules, const char *text,
			   const char *source, char *err, size_t errlen);

/* 1 if the program name (a file name, no directory) is allowed. */
int dsock_rules_program_allowed(const struct dsock_rules *rules, const char *prog);

/* 1 if a connection between local and peer (AF_INET/AF_INET6 sockaddrs;
 * either may be NULL) is allowed; *rule gets the matching rule's index or -1. */
int dsock_rules_conn_allowed(const struct dsock_rules *rules,
			     const struct sockaddr *local, const struct sockaddr *peer,
			     int *rule);

/* 1 if a rule names a port: judging a connection then needs its local
 * address. */
int dsock_rules_name_ports(const struct dsock_rules *rules);

/* Simple glob: '*' any run, '?' one char.  1 on match. */
int dsock_glob_match(const char *pat, const char *s);

#endif
