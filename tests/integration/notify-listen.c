/*
 * notify-listen - the service manager's side of sd_notify, for the tests:
 * binds a Unix datagram socket at PATH and writes every datagram received
 * to stdout, one per line (its newlines as '|'), until killed or until
 * SECONDS pass.
 *
 *   notify-listen PATH SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: notify-listen PATH SECONDS\n");
        return 2;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(argv[1]) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "notify-listen: path too long\n");
        return 2;
    }
    memcpy(sa.sun_path, argv[1], strlen(argv[1]) + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    unlink(argv[1]);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("notify-listen: bind");
        return 1;
    }
    time_t end = time(NULL) + strtol(argv[2], NULL, 10);
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    printf("listening\n");
    fflush(stdout);
    char buf[4096];
    while (time(NULL) < end) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == '\n')
                buf[i] = '|';
        buf[n] = '\0';
        printf("%s\n", buf);
        fflush(stdout);
    }
    unlink(argv[1]);
    return 0;
}
