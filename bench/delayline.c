/* A delay line for bench/wan.py: a TCP proxy that holds every byte, in each direction, for half a round trip.
 *
 * This kernel has no netem, so a WAN is made in user space: bytes read from one side are released to the other
 * side DELAY later, in order; reading never waits for the release, so the bandwidth is kept (only the round trip
 * is added). Optionally each direction is capped at MBIT megabits a second, shared by all connections (one link).
 * One thread, epoll, no allocation but the held chunks.
 *
 * usage: delayline LISTEN_PORT TARGET_HOST:PORT [ONE_WAY_MS [MBIT]]
 * The delay and the cap can be changed while it runs: a line "ONE_WAY_MS [MBIT]" on stdin (MBIT 0: no cap) applies
 * to bytes read from then on (bytes already held keep their release time; order is kept either way).
 * It prints "ready PORT" on stdout once it listens (PORT 0 picks a free one). Built by bench/build-delayline.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_SIZE (256 * 1024)
/* Bytes held per direction of a connection before reading stops (TCP pushes back on the sender): far above what
 * any round trip here holds (100 ms at 1 GB/s), only a bound on memory. */
#define MAX_HELD (256L * 1024 * 1024)

typedef struct chunk {
    struct chunk *next;
    int64_t release_ns; /* monotonic time it may be written */
    size_t len, off;
    int eof; /* the reader side closed: shut the writer side down at release */
    char data[];
} chunk;

typedef struct conn conn;
typedef struct dir {
    conn *c;
    int from, to;      /* fds */
    chunk *head, *tail;
    size_t held;
    int64_t last_release;
    int reading;       /* EPOLLIN wanted on `from` */
    int want_out;      /* EPOLLOUT wanted on `to` */
    int done;          /* EOF delivered */
    int bucket;        /* 0 or 1: which direction's bandwidth cap */
} dir;

struct conn {
    dir d[2]; /* d[0]: client -> target, d[1]: target -> client */
    int fds[2];
    int connected;
    int dead;
    conn *next;
};

static int ep;
static int64_t delay_ns = 0;
static double cap_bytes_per_ns = 0; /* 0: no cap */
static double tokens[2];
static int64_t tokens_at[2];
static conn *conns = NULL;
static struct sockaddr_storage target;
static socklen_t target_len;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void update_fd(conn *c, int side) {
    /* fd of `side` reads for the direction starting there and writes for the direction ending there */
    int fd = c->fds[side];
    if (fd < 0)
        return;
    dir *out_dir = &c->d[side];     /* reads from this fd */
    dir *in_dir = &c->d[1 - side];  /* writes to this fd */
    struct epoll_event ev = {0};
    /* no EPOLLRDHUP: the end of the stream is read like data (EPOLLIN), and a level-triggered RDHUP would fire
     * again and again once reading stopped */
    ev.events = (out_dir->reading && c->connected ? EPOLLIN : 0) | (in_dir->want_out ? EPOLLOUT : 0);
    ev.data.u64 = ((uint64_t)(uintptr_t)c) | (uint64_t)side; /* conn is aligned: low bit is free */
    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

static void kill_conn(conn *c) {
    if (c->dead)
        return;
    c->dead = 1;
    for (int s = 0; s < 2; s++) {
        if (c->fds[s] >= 0) {
            epoll_ctl(ep, EPOLL_CTL_DEL, c->fds[s], NULL);
            close(c->fds[s]);
            c->fds[s] = -1;
        }
        chunk *k = c->d[s].head;
        while (k) {
            chunk *n = k->next;
            free(k);
            k = n;
        }
        c->d[s].head = c->d[s].tail = NULL;
        c->d[s].held = 0;
    }
}

static void push(dir *d, chunk *k) {
    int64_t rel = now_ns() + delay_ns;
    if (rel < d->last_release)
        rel = d->last_release; /* order is kept when the delay is lowered */
    d->last_release = rel;
    k->release_ns = rel;
    k->next = NULL;
    if (d->tail)
        d->tail->next = k;
    else
        d->head = k;
    d->tail = k;
    d->held += k->len;
}

/* Bytes the cap lets through now in bucket b (SIZE_MAX without a cap); a burst of at most 10 ms. */
static size_t allowance(int b, int64_t t) {
    if (cap_bytes_per_ns <= 0)
        return (size_t)-1;
    double burst = cap_bytes_per_ns * 10e6;
    tokens[b] += (t - tokens_at[b]) * cap_bytes_per_ns;
    tokens_at[b] = t;
    if (tokens[b] > burst)
        tokens[b] = burst;
    return tokens[b] > 0 ? (size_t)tokens[b] : 0;
}

/* Write what is due; returns the ns until the next release (-1: nothing held), 0 when it waits for EPOLLOUT. */
static int64_t flush_dir(dir *d) {
    conn *c = d->c;
    int64_t t = now_ns();
    int was_out = d->want_out;
    d->want_out = 0;
    int64_t wait = -1;
    while (d->head && !c->dead) {
        chunk *k = d->head;
        if (k->release_ns > t) {
            wait = k->release_ns - t;
            break;
        }
        if (k->eof) {
            shutdown(d->to, SHUT_WR);
            d->done = 1;
            d->head = k->next;
            if (!d->head)
                d->tail = NULL;
            free(k);
            continue;
        }
        size_t n = k->len - k->off, allow = allowance(d->bucket, t);
        if (allow == 0) {
            wait = (int64_t)(1.0 / cap_bytes_per_ns * 1500) + 1; /* about one packet's time */
            break;
        }
        if (n > allow)
            n = allow;
        ssize_t w = write(d->to, k->data + k->off, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                d->want_out = 1;
                wait = 0;
                break;
            }
            kill_conn(c);
            return -1;
        }
        if (cap_bytes_per_ns > 0)
            tokens[d->bucket] -= (double)w;
        k->off += (size_t)w;
        d->held -= (size_t)w;
        if (k->off < k->len)
            continue; /* partial: try again (EAGAIN or the cap stops it) */
        d->head = k->next;
        if (!d->head)
            d->tail = NULL;
        free(k);
    }
    int was_reading = d->reading;
    d->reading = !d->done && d->held < MAX_HELD && !(d->tail && d->tail->eof);
    if (!c->dead && (was_out != d->want_out || was_reading != d->reading)) {
        update_fd(c, d == &c->d[0] ? 1 : 0); /* the fd written to */
        update_fd(c, d == &c->d[0] ? 0 : 1); /* the fd read from */
    }
    if (c->dead)
        return -1;
    if (d->done && c->d[0].done && c->d[1].done)
        kill_conn(c);
    return wait;
}

static void read_dir(dir *d) {
    conn *c = d->c;
    for (int i = 0; i < 4 && d->reading && !c->dead; i++) { /* a few reads, then let the others in */
        chunk *k = malloc(sizeof(chunk) + READ_SIZE);
        if (!k) {
            kill_conn(c);
            return;
        }
        ssize_t r = read(d->from, k->data, READ_SIZE);
        if (r < 0) {
            free(k);
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                kill_conn(c);
            return;
        }
        if (r < READ_SIZE / 4) {
            chunk *small = realloc(k, sizeof(chunk) + (r ? (size_t)r : 1));
            if (small)
                k = small;
        }
        k->len = (size_t)r;
        k->off = 0;
        k->eof = r == 0;
        push(d, k);
        if (r == 0 || d->held >= MAX_HELD)
            break;
        if (r < READ_SIZE)
            break; /* drained */
    }
    flush_dir(d);
}

static void accept_all(int lfd) {
    for (;;) {
        int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
            return;
        int tfd = socket(target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (tfd < 0) {
            close(cfd);
            continue;
        }
        nodelay(cfd);
        nodelay(tfd);
        if (connect(tfd, (struct sockaddr *)&target, target_len) < 0 && errno != EINPROGRESS) {
            close(cfd);
            close(tfd);
            continue;
        }
        conn *c = aligned_alloc(16, (sizeof(conn) + 15) / 16 * 16);
        memset(c, 0, sizeof *c);
        c->fds[0] = cfd;
        c->fds[1] = tfd;
        for (int s = 0; s < 2; s++) {
            c->d[s].c = c;
            c->d[s].from = c->fds[s];
            c->d[s].to = c->fds[1 - s];
            c->d[s].reading = 1;
            c->d[s].bucket = s;
        }
        c->next = conns;
        conns = c;
        struct epoll_event ev = {0};
        ev.events = 0; /* the client is read once the target is connected */
        ev.data.u64 = (uint64_t)(uintptr_t)c;
        epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
        ev.events = EPOLLOUT;
        ev.data.u64 = (uint64_t)(uintptr_t)c | 1;
        epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    }
}

static void control(char *line) {
    double ms = 0, mbit = 0;
    int n = sscanf(line, "%lf %lf", &ms, &mbit);
    if (n < 1)
        return;
    delay_ns = (int64_t)(ms * 1e6);
    cap_bytes_per_ns = mbit > 0 ? mbit * 1e6 / 8 / 1e9 : 0;
    for (int b = 0; b < 2; b++) {
        tokens[b] = 0;
        tokens_at[b] = now_ns();
    }
    fprintf(stdout, "set %.3f ms %.1f Mbit/s\n", ms, mbit);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LISTEN_PORT TARGET_HOST:PORT [ONE_WAY_MS [MBIT]]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char host[256];
    const char *colon = strrchr(argv[2], ':');
    if (!colon || (size_t)(colon - argv[2]) >= sizeof host) {
        fprintf(stderr, "delayline: target must be HOST:PORT, not %s\n", argv[2]);
        return 2;
    }
    memcpy(host, argv[2], (size_t)(colon - argv[2]));
    host[colon - argv[2]] = 0;
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        fprintf(stderr, "delayline: cannot resolve %s\n", argv[2]);
        return 2;
    }
    memcpy(&target, ai->ai_addr, ai->ai_addrlen);
    target_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    char first[64];
    snprintf(first, sizeof first, "%s %s", argc > 3 ? argv[3] : "0", argc > 4 ? argv[4] : "0");
    control(first);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in la = {0};
    la.sin_family = AF_INET;
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    la.sin_port = htons((uint16_t)atoi(argv[1]));
    if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 512) < 0) {
        fprintf(stderr, "delayline: cannot listen on 127.0.0.1:%s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    socklen_t ll = sizeof la;
    getsockname(lfd, (struct sockaddr *)&la, &ll);
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.u64 = 2; /* the listener */
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.u64 = 4; /* stdin: control lines */
    int have_stdin = epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev) == 0;
    (void)have_stdin;
    printf("ready %d\n", ntohs(la.sin_port));
    fflush(stdout);

    char ctl[256];
    size_t ctl_len = 0;
    struct epoll_event evs[256];
    int64_t timeout = -1;
    for (;;) {
        struct timespec ts = {timeout / 1000000000, timeout % 1000000000};
        int n = epoll_pwait2(ep, evs, 256, timeout < 0 ? NULL : &ts, NULL);
        for (int i = 0; i < n; i++) {
            uint64_t u = evs[i].data.u64;
            if (u == 2) {
                accept_all(lfd);
                continue;
            }
            if (u == 4) {
                ssize_t r = read(0, ctl + ctl_len, sizeof ctl - 1 - ctl_len);
                if (r <= 0) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL); /* stdin closed: keep the settings */
                    continue;
                }
                ctl_len += (size_t)r;
                ctl[ctl_len] = 0;
                char *nl;
                while ((nl = strchr(ctl, '\n'))) {
                    *nl = 0;
                    control(ctl);
                    ctl_len -= (size_t)(nl + 1 - ctl);
                    memmove(ctl, nl + 1, ctl_len + 1);
                }
                if (ctl_len == sizeof ctl - 1)
                    ctl_len = 0;
                continue;
            }
            conn *c = (conn *)(uintptr_t)(u & ~(uint64_t)1);
            int side = (int)(u & 1);
            if (c->dead)
                continue;
            uint32_t e = evs[i].events;
            if (!c->connected && side == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fds[1], SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || (e & (EPOLLERR | EPOLLHUP))) {
                    kill_conn(c);
                    continue;
                }
                c->connected = 1;
                update_fd(c, 0);
                update_fd(c, 1);
                continue;
            }
            if (e & EPOLLERR) {
                kill_conn(c);
                continue;
            }
            if (e & EPOLLOUT)
                flush_dir(&c->d[1 - side]);
            if (!c->dead && (e & (EPOLLIN | EPOLLHUP)))
                read_dir(&c->d[side]);
            /* hung up while not read (it said its end already): nothing more can pass, and HUP would fire forever */
            if (!c->dead && (e & EPOLLHUP) && !c->d[side].reading)
                kill_conn(c);
        }
        /* Release what is due everywhere; sleep until the next release. */
        int64_t next = -1;
        conn **pp = &conns;
        while (*pp) {
            conn *c = *pp;
            for (int s = 0; s < 2 && !c->dead; s++) {
                if (!c->d[s].head || c->d[s].want_out)
                    continue;
                int64_t w = flush_dir(&c->d[s]);
                if (w > 0 && (next < 0 || w < next))
                    next = w;
            }
            if (c->dead) {
                *pp = c->next;
                free(c);
            } else {
                pp = &c->next;
            }
        }
        timeout = next;
    }
}
